package lock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// countingBatcher is a memlock Lock whose batches count their Renew calls
// and can be told to stall (Renew waits for its context to end).
type countingBatcher struct {
	*memlock.Lock
	renews  atomic.Int32
	handles atomic.Int32 // offered to Renew
	renewed atomic.Int32 // renewed by Renew
	stalled atomic.Bool
	hung    chan struct{} // when set, Renew waits for it whatever its context (a driver stuck on a dead connection)
}

func (c *countingBatcher) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	b, err := c.Lock.NewBatch(ctx, ttl)
	if err != nil {
		return nil, err
	}
	return &countingBatch{Batch: b, c: c}, nil
}

type countingBatch struct {
	lock.Batch
	c *countingBatcher
}

func (b *countingBatch) Renew(ctx context.Context, hs []lock.Handle) []error {
	b.c.renews.Add(1)
	b.c.handles.Add(int32(len(hs)))
	if b.c.hung != nil {
		<-b.c.hung
	}
	if b.c.stalled.Load() {
		<-ctx.Done()
		errs := make([]error, len(hs))
		for i := range errs {
			errs[i] = fmt.Errorf("%w: stalled: %w", lock.ErrUnavailable, ctx.Err())
		}
		return errs
	}
	errs := b.Batch.Renew(ctx, hs)
	for _, err := range errs {
		if err == nil {
			b.c.renewed.Add(1)
		}
	}
	return errs
}

func TestKeeperRenewsAllLeasesInOneCallPerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingBatcher{Lock: testkit.Must(memlock.New())}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		defer k.Close(context.Background())
		goroutines := runtime.NumGoroutine()
		const n = 500
		leases := make([]*lock.Lease, n)
		for i := range leases {
			leases[i] = testkit.Must(k.TryAcquire(t.Context(), fmt.Sprintf("k%d", i)))
		}
		if d := runtime.NumGoroutine() - goroutines; d > 0 {
			t.Fatalf("%d leases added %d goroutines, want none", n, d)
		}
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if r := c.renews.Load(); r != 10 {
			t.Fatalf("%d Renew calls in 10 s with ttl 3 s, want 10 (one per renewal period of 1 s)", r)
		}
		if h := c.handles.Load(); h != 10*n {
			t.Fatalf("%d handles renewed, want %d", h, 10*n)
		}
		other := testkit.Must(c.Share())
		for i, l := range leases {
			if err := l.Context().Err(); err != nil {
				t.Fatalf("lease %d ended while renewals succeed: %v", i, context.Cause(l.Context()))
			}
			if _, err := other.TryAcquire(t.Context(), l.Handle().Key(), time.Second); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("kept key %s acquirable by another owner: %v", l.Handle().Key(), err)
			}
		}
		if k.Len() != n {
			t.Fatalf("Len = %d, want %d", k.Len(), n)
		}
	})
}

func TestKeeperReportsOneLostLeaseAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(l, 3*time.Second))
		defer k.Close(context.Background())
		leases := make([]*lock.Lease, 10)
		for i := range leases {
			leases[i] = testkit.Must(k.TryAcquire(t.Context(), fmt.Sprintf("k%d", i)))
		}
		if ok, err := l.ForceRelease(t.Context(), "k3"); !ok || err != nil {
			t.Fatalf("ForceRelease: %v %v", ok, err)
		}
		time.Sleep(time.Second + time.Millisecond) // one renewal round
		synctest.Wait()
		for i, le := range leases {
			cause := context.Cause(le.Context())
			if i == 3 {
				if !errors.Is(cause, lock.ErrLost) || !errors.Is(le.Err(), lock.ErrLost) {
					t.Fatalf("force-released lease: cause %v, Err %v; want ErrLost", cause, le.Err())
				}
				continue
			}
			if cause != nil {
				t.Fatalf("lease %d ended with the other's loss: %v", i, cause)
			}
		}
		if err := leases[3].Release(t.Context()); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Release of the lost lease: %v, want ErrLost", err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for i, le := range leases {
			if i != 3 && le.Err() != nil {
				t.Fatalf("lease %d lost later: %v", i, le.Err())
			}
		}
	})
}

func TestKeeperStalledBatchEndsLeasesAtValidUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingBatcher{Lock: testkit.Must(memlock.New())}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second, lock.WithMargin(100*time.Millisecond)))
		defer k.Close(context.Background())
		a := testkit.Must(k.TryAcquire(t.Context(), "a"))
		time.Sleep(500 * time.Millisecond)
		b := testkit.Must(k.TryAcquire(t.Context(), "b"))
		c.stalled.Store(true)
		deadlineA, deadlineB := a.ValidUntil().Add(-100*time.Millisecond), b.ValidUntil().Add(-100*time.Millisecond)
		time.Sleep(time.Until(deadlineA) - time.Millisecond)
		synctest.Wait()
		if a.Err() != nil || b.Err() != nil {
			t.Fatalf("a lease ended before its ValidUntil less the margin: %v, %v", a.Err(), b.Err())
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if !errors.Is(a.Err(), lock.ErrLost) {
			t.Fatalf("a: %v at its deadline, want ErrLost", a.Err())
		}
		if b.Err() != nil {
			t.Fatalf("b ended with a, before its own deadline: %v", b.Err())
		}
		time.Sleep(time.Until(deadlineB) + time.Millisecond)
		synctest.Wait()
		if !errors.Is(b.Err(), lock.ErrLost) {
			t.Fatalf("b: %v after its deadline, want ErrLost", b.Err())
		}
	})
}

// soloLock hides memlock's Batcher: the Keeper renews each handle with its
// own Extend.
type soloLock struct{ lock.Lock }

func TestKeeperWithoutBatcherRenewsEachHandle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(soloLock{m}, 3*time.Second))
		defer k.Close(context.Background())
		var leases []*lock.Lease
		for i := range 40 { // more than the pool
			leases = append(leases, testkit.Must(k.TryAcquire(t.Context(), fmt.Sprintf("k%d", i))))
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for i, l := range leases {
			if l.Err() != nil {
				t.Fatalf("lease %d: %v", i, l.Err())
			}
		}
		if ok, _ := m.ForceRelease(t.Context(), "k7"); !ok {
			t.Fatal("ForceRelease found nothing")
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		for i, l := range leases {
			if (i == 7) != errors.Is(l.Err(), lock.ErrLost) {
				t.Fatalf("lease %d: Err %v", i, l.Err())
			}
		}
	})
}

func TestKeeperKeepAdoptsHandles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingBatcher{Lock: testkit.Must(memlock.New())}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		defer k.Close(context.Background())
		h := testkit.Must(c.TryAcquire(t.Context(), "adopted", 3*time.Second))
		l := testkit.Must(k.Keep(t.Context(), h))
		// Through Hold and WithKeeper too.
		h2 := testkit.Must(c.TryAcquire(t.Context(), "held", 3*time.Second))
		err := lock.Hold(t.Context(), h2, 3*time.Second, func(ctx context.Context) error {
			if k.Len() != 2 {
				return fmt.Errorf("Len = %d during Hold, want 2", k.Len())
			}
			time.Sleep(10 * time.Second)
			return context.Cause(ctx)
		}, lock.WithKeeper(k))
		if err != nil {
			t.Fatal(err)
		}
		if l.Err() != nil || c.renews.Load() == 0 {
			t.Fatalf("adopted lease: %v after %d Renew calls", l.Err(), c.renews.Load())
		}
		if k.Len() != 1 {
			t.Fatalf("Len = %d after Hold returned, want 1", k.Len())
		}
		h3 := testkit.Must(c.TryAcquire(t.Context(), "other ttl", time.Second))
		if err := lock.Hold(t.Context(), h3, time.Second, func(context.Context) error { return nil }, lock.WithKeeper(k)); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("Hold with another ttl than the Keeper's: %v, want ErrInvalidArgument", err)
		}
	})
}

func TestKeeperCloseReleasesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := testkit.Must(memlock.New())
		goroutines := runtime.NumGoroutine()
		k := testkit.Must(lock.NewKeeper(m, 3*time.Second))
		leases := make([]*lock.Lease, 50)
		for i := range leases {
			leases[i] = testkit.Must(k.TryAcquire(t.Context(), fmt.Sprintf("k%d", i)))
		}
		if err := leases[0].Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := k.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for i, l := range leases {
			if l.Context().Err() == nil || l.Err() != nil {
				t.Fatalf("lease %d after Close: ctx %v, Err %v; want cancelled, not lost", i, l.Context().Err(), l.Err())
			}
			if h, err := m.TryAcquire(t.Context(), l.Handle().Key(), time.Second); err != nil {
				t.Fatalf("key %d still held after Close: %v", i, err)
			} else {
				_ = h.Release(t.Context())
			}
		}
		if _, err := k.TryAcquire(t.Context(), "late"); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("TryAcquire after Close: %v, want ErrInvalidArgument", err)
		}
		if err := k.Close(t.Context()); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if d := runtime.NumGoroutine() - goroutines; d > 0 {
			t.Fatalf("%d goroutines left after Close", d)
		}
	})
}

func TestKeeperAcquireWaitsForARelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(m, 3*time.Second))
		defer k.Close(context.Background())
		h := testkit.Must(testkit.Must(m.Share()).TryAcquire(t.Context(), "k", time.Hour))
		got := make(chan *lock.Lease, 1)
		go func() { got <- testkit.Must(k.Acquire(t.Context(), "k")) }()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("Acquire returned while the key was held")
		default:
		}
		time.Sleep(time.Minute)
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l.Token() <= h.Token() {
			t.Fatalf("token %d after %d", l.Token(), h.Token())
		}
	})
}

func TestKeeperRefusesBadInput(t *testing.T) {
	m := testkit.Must(memlock.New())
	for name, fn := range map[string]func() error{
		"nil Lock":            func() error { _, err := lock.NewKeeper(nil, time.Second); return err },
		"zero ttl":            func() error { _, err := lock.NewKeeper(m, 0); return err },
		"margin past the ttl": func() error { _, err := lock.NewKeeper(m, time.Second, lock.WithMargin(time.Second)); return err },
		"WithKeeper":          func() error { _, err := lock.NewKeeper(m, time.Second, lock.WithKeeper(&lock.Keeper{})); return err },
		"nil handle": func() error {
			_, err := testkit.Must(lock.NewKeeper(m, time.Second)).Keep(t.Context(), nil)
			return err
		},
		"empty key": func() error {
			_, err := testkit.Must(lock.NewKeeper(m, time.Second)).TryAcquire(t.Context(), "")
			return err
		},
	} {
		if err := fn(); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// wrapped is a handle that wraps another, as semaphore.Permit does.
type wrapped struct{ lock.Handle }

func (w wrapped) Unwrap() lock.Handle { return w.Handle }

func TestKeeperRenewsAWrapperAsTheHandleItWraps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingBatcher{Lock: testkit.Must(memlock.New())}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		defer k.Close(context.Background())
		inner := &scripted{Handle: testkit.Must(c.TryAcquire(t.Context(), "k", 3*time.Second))}
		l := testkit.Must(k.Keep(t.Context(), wrapped{inner}))
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		// The memlock Batch refuses the scripted wrapper (not its
		// handle), so the Keeper renews it alone from then on: one
		// Renew that offered it, then its own Extends.
		if c.handles.Load() != 1 || inner.extends.Load() != 1 {
			t.Fatalf("after one round: %d handles offered to Renew, %d own Extends; want 1 and 1", c.handles.Load(), inner.extends.Load())
		}
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
		m := testkit.Must(c.TryAcquire(t.Context(), "m", 3*time.Second))
		lm := testkit.Must(k.Keep(t.Context(), wrapped{m}))
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		// The plain memlock handle under a wrapper is the Batch's.
		if c.renewed.Load() != 1 || inner.extends.Load() != 2 || lm.Err() != nil {
			t.Fatalf("after two rounds: %d handles renewed by Renew, %d own Extends, %v; want 1, 2, nil", c.renewed.Load(), inner.extends.Load(), lm.Err())
		}
	})
}

// Keeper.Hold runs fn under a lease of the Keeper whose context carries
// the token, and releases the grant once fn returned; a grant lost while
// fn runs makes the error match ErrLost; bad input is refused and the
// grant is released.
func TestKeeperHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(l, 3*time.Second))
		defer k.Close(context.Background())
		h := testkit.Must(l.TryAcquire(t.Context(), "a", 3*time.Second))
		err := k.Hold(t.Context(), h, func(ctx context.Context) error {
			if tok, ok := lock.TokenFrom(ctx); !ok || tok != h.Token() || k.Len() != 1 {
				t.Errorf("in fn: token %d, %v, %d leases; want %d, true, 1", tok, ok, k.Len(), h.Token())
			}
			time.Sleep(10 * time.Second) // renewed by the Keeper meanwhile
			return ctx.Err()
		})
		if err != nil || k.Len() != 0 {
			t.Fatalf("Hold: %v, %d leases after; want nil, 0", err, k.Len())
		}
		if again, err := l.TryAcquire(t.Context(), "a", time.Second); err != nil {
			t.Fatalf("a after Hold: %v; want it released", err)
		} else {
			_ = again.Release(t.Context())
		}

		h = testkit.Must(l.TryAcquire(t.Context(), "b", 3*time.Second))
		err = k.Hold(t.Context(), h, func(ctx context.Context) error {
			if _, err := l.ForceRelease(t.Context(), "b"); err != nil {
				t.Error(err)
			}
			<-ctx.Done() // the Keeper's next renewal finds it gone
			return nil
		})
		if !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Hold of a grant lost meanwhile: %v; want ErrLost", err)
		}

		h = testkit.Must(l.TryAcquire(t.Context(), "c", 3*time.Second))
		if err := k.Hold(t.Context(), h, nil); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("Hold of a nil fn: %v; want ErrInvalidArgument", err)
		}
		_ = h.Release(t.Context())
	})
}

// A handle adopted by Hold that is valid for longer than the Keeper's
// leases (taken with a longer ttl) is released all the same once fn
// returns, under a bound of its own.
func TestKeeperHoldOfALongerGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(l, 3*time.Second))
		defer k.Close(context.Background())
		h := testkit.Must(l.TryAcquire(t.Context(), "long", time.Hour))
		if err := k.Hold(t.Context(), h, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if again, err := l.TryAcquire(t.Context(), "long", time.Second); err != nil {
			t.Fatalf("long after Hold: %v; want it released", err)
		} else {
			_ = again.Release(t.Context())
		}
	})
}

// A Keeper's Keep, and Hold, of a handle already past its ValidUntil less
// the Keeper's margin returns a lease already lost (it stays the Keeper's
// until its Release), and fn never sees a live context on it. The
// Keeper's expiry timer ended it a moment later, on another goroutine:
// the lease came back live, and fn started on a grant another holder had.
func TestKeeperKeepOfAHandlePastItsDeadlineIsLostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(l, 3*time.Second, lock.WithMargin(time.Second)))
		defer k.Close(context.Background())
		lease := keepWithinTheMargin(t, l, func(h lock.Handle) (*lock.Lease, error) { return k.Keep(t.Context(), h) })
		if n := k.Len(); n != 1 {
			t.Fatalf("the Keeper holds %d leases, want the lost one until its Release", n)
		}
		_ = lease.Release(t.Context())
		live, err := holdATakenGrant(t, l, func(h lock.Handle, fn func(context.Context) error) error {
			return k.Hold(t.Context(), h, fn)
		})
		if live || !errors.Is(err, lock.ErrLost) || k.Len() != 0 {
			t.Fatalf("Hold of a grant another holder took: fn's context live %v, Hold returned %v, %d leases after; want a cancelled context, ErrLost, 0 leases",
				live, err, k.Len())
		}
	})
}
