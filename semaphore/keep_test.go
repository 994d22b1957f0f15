package semaphore_test

import (
	"context"
	"errors"
	"fmt"
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

// The leases of a permit (Acquire's, Do's, lock.Keep's of a TryAcquire
// permit) end the moment the backend reports the slot gone (memlock's
// handles are lock.LossNotifiers), as a lease of the grant itself does.
// The Permit used to embed its grant's lock.Handle only, which hid the
// grant's Lost channel: every such lease went on until its next renewal
// (ttl/3, here 10 s), while another process could take and work on the
// slot.
func TestPermitLeasesEndAtALossTheBackendReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const name, ttl = "reported", 30 * time.Second
		l := testkit.Must(memlock.New())
		sem := newSem(t, l, name, 3)
		ctx := t.Context()
		acquired, err := sem.Acquire(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		p, err := sem.TryAcquire(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := lock.Keep(ctx, p, ttl)
		if err != nil {
			t.Fatal(err)
		}
		fnCtx, doErr := make(chan context.Context, 1), make(chan error, 1)
		go func() {
			doErr <- sem.Do(ctx, func(ctx context.Context) error {
				fnCtx <- ctx
				<-ctx.Done()
				return nil
			})
		}()
		leases := map[string]context.Context{"Acquire": acquired.Context(), "lock.Keep": kept.Context(), "Do": <-fnCtx}
		for i := range 3 { // an operator frees every slot
			if _, err := l.ForceRelease(ctx, semaphore.SlotKey(name, i)); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // no time passes: no renewal happens
		for who, c := range leases {
			if cause := context.Cause(c); !errors.Is(cause, lock.ErrLost) {
				t.Errorf("%s's lease at the reported loss: %v, want ErrLost at once", who, cause)
			}
		}
		for who, release := range map[string]func(context.Context) error{"Acquire": acquired.Release, "lock.Keep": kept.Release} {
			if err := release(ctx); !errors.Is(err, lock.ErrLost) {
				t.Errorf("%s's Release: %v, want ErrLost", who, err)
			}
		}
		if err := <-doErr; !errors.Is(err, lock.ErrLost) {
			t.Errorf("Do: %v, want ErrLost", err)
		}
	})
}

// A permit of a grant without a loss report (as redislock's) reports none
// (Lost is nil, never closed): its lease is kept by renewal and is not
// taken for lost.
func TestPermitWithoutALossReportIsKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sem := newSem(t, &bareLock{Lock: testkit.Must(memlock.New())}, "bare", 1)
		ctx := t.Context()
		lease, err := sem.Acquire(ctx, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := lease.Handle().(lock.LossNotifier); !ok || n.Lost() != nil {
			t.Errorf("the permit of a bare grant: LossNotifier %v, want one with a nil channel", ok)
		}
		time.Sleep(10 * time.Second) // many renewals
		if err := lease.Context().Err(); err != nil {
			t.Errorf("the lease ended: %v", context.Cause(lease.Context()))
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// bareLock is a Lock whose grants are bare lock.Handles (no loss report,
// no optional capability, as redislock's). While unknownReleases is above
// zero, a Release fails with an unknown outcome (lock.ErrUnavailable, a
// round trip that timed out) and leaves the grant held; it counts down.
type bareLock struct {
	lock.Lock
	unknownReleases atomic.Int32
}

func (b *bareLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := b.Lock.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return bareHandle{h, b}, nil
}

type bareHandle struct {
	lock.Handle
	l *bareLock
}

func (h bareHandle) Release(ctx context.Context) error {
	if h.l.unknownReleases.Add(-1) >= 0 {
		return fmt.Errorf("%w: injected: the release timed out", lock.ErrUnavailable)
	}
	return h.Handle.Release(ctx)
}
