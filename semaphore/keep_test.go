package semaphore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// Acquire keeps its slot until Release, however long the work: exactly,
// in a synctest bubble.
func TestAcquireKeepsTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := testkit.Must(memlock.New())
		testAcquireKeeps(t, func(testing.TB) lock.Lock { return testkit.Must(shared.Share()) }, time.Second)
	})
}

// testAcquireKeeps: 9 workers, each with its own instance, Acquire a slot
// of 3 and work one and a half ttls. Never more than 3 work at once and no
// lease is lost: Acquire renews. (Its permits used to lapse at their ttl:
// all 9 worked at once, told only by ErrLost from Release afterwards.)
func testAcquireKeeps(t *testing.T, newLock func(testing.TB) lock.Lock, ttl time.Duration) {
	const size, workers = 3, 9
	name := uniqueName(t)
	var (
		inUse, peak atomic.Int32
		wg          sync.WaitGroup
	)
	for range workers {
		sem := newSem(t, newLock(t), name, size)
		wg.Go(func() {
			p, err := sem.Acquire(t.Context(), ttl)
			if err != nil {
				t.Error(err)
				return
			}
			n := inUse.Add(1)
			for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
			}
			time.Sleep(ttl * 3 / 2) // the work, longer than the ttl
			inUse.Add(-1)
			if err := p.Release(t.Context()); err != nil {
				t.Errorf("slot %d: Release: %v", p.Slot(), err)
			}
		})
	}
	wg.Wait()
	if got := peak.Load(); got > size {
		t.Fatalf("%d workers worked at once on %d slots", got, size)
	}
}

// A lease whose slot is lost (here an operator's ForceRelease) ends its
// Context with a cause matching lock.ErrLost, and Release reports it.
func TestAcquireReportsALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		sem := newSem(t, l, "lost", 1)
		ctx := t.Context()
		lease, err := sem.Acquire(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.ForceRelease(ctx, semaphore.SlotKey("lost", lease.Slot())); err != nil {
			t.Fatal(err)
		}
		<-lease.Context().Done()
		if cause := context.Cause(lease.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Fatalf("the lease's Context ended with %v, want ErrLost", cause)
		}
		if err := lease.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Release after the loss: %v, want ErrLost", err)
		}
	})
}

// A ttl too short to renew is refused before any slot is taken.
func TestAcquireRefusesATTLTooShortToRenew(t *testing.T) {
	sem := newSem(t, testkit.Must(memlock.New()), "short", 1)
	ctx := t.Context()
	if _, err := sem.Acquire(ctx, 2*time.Nanosecond); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Fatalf("Acquire(2ns): %v, want ErrInvalidTTL", err)
	}
	p, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatalf("the slot is not free after the refusal: %v", err)
	}
	_ = p.Release(ctx)
}
