package lock_test

import (
	"context"
	"errors"
	"github.com/leasehold-go/leasehold/internal/testkit"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// scripted wraps a real handle and lets a test decide what Extend answers.
type scripted struct {
	lock.Handle
	extends atomic.Int32
	extend  func(ctx context.Context, ttl time.Duration) error // nil: the real Extend
}

func (s *scripted) Extend(ctx context.Context, ttl time.Duration) error {
	s.extends.Add(1)
	if s.extend != nil {
		return s.extend(ctx, ttl)
	}
	return s.Handle.Extend(ctx, ttl)
}

func TestKeepRenewsEveryThirdOfTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, err := l.TryAcquire(t.Context(), "k", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := &scripted{Handle: h}
		lease, err := lock.Keep(t.Context(), s, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if n := s.extends.Load(); n != 10 {
			t.Fatalf("%d renewals in 10 s with ttl 3 s, want 10", n)
		}
		if err := lease.Context().Err(); err != nil {
			t.Fatalf("lease ended while renewals succeed: %v", context.Cause(lease.Context()))
		}
		if _, err := testkit.Must(l.Share()).TryAcquire(t.Context(), "k", time.Second); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("kept key acquirable by another owner: %v", err)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if n := s.extends.Load(); n != 10 {
			t.Fatalf("renewals went on after Release: %d", n)
		}
	})
}

func TestKeepUnknownOutcomesEndAtValidUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 3*time.Second)
		validUntil := h.ValidUntil()
		s := &scripted{Handle: h, extend: func(context.Context, time.Duration) error {
			return backendkit.Unavailable("extend", errors.New("connection reset"))
		}}
		lease, _ := lock.Keep(t.Context(), s, 3*time.Second)
		<-lease.Context().Done()
		if now := time.Now(); !now.Equal(validUntil) {
			t.Fatalf("lease ended at %v, want exactly ValidUntil %v", now, validUntil)
		}
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("cause %v, want ErrLost", lease.Err())
		}
		if s.extends.Load() < 2 {
			t.Fatalf("an unknown outcome must be retried before ValidUntil; %d attempts", s.extends.Load())
		}
		_ = lease.Release(t.Context())
	})
}

// A renewal that hangs past its context (a driver that ignores contexts
// on a stalled connection) must not hold the loss signal: the lease ends at
// ValidUntil, and Release still waits for the hung call to return.
func TestKeepEndsAtValidUntilWhileARenewalHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 3*time.Second)
		validUntil := h.ValidUntil()
		unblock := make(chan struct{})
		s := &scripted{Handle: h, extend: func(context.Context, time.Duration) error {
			<-unblock // ignores its context, as go-redis does without ContextTimeoutEnabled
			return backendkit.Unavailable("extend", errors.New("i/o timeout"))
		}}
		lease, _ := lock.Keep(t.Context(), s, 3*time.Second)
		<-lease.Context().Done()
		if now := time.Now(); !now.Equal(validUntil) {
			t.Fatalf("lease ended at %v, want exactly ValidUntil %v", now, validUntil)
		}
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("cause %v, want ErrLost", lease.Err())
		}
		released := make(chan error, 1)
		go func() { released <- lease.Release(context.Background()) }()
		synctest.Wait()
		select {
		case <-released:
			t.Fatal("Release returned while a renewal was still in flight")
		default:
		}
		time.Sleep(2 * time.Second) // the driver's own timeout
		close(unblock)
		if err := <-released; !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Release after the lease ended: %v, want ErrLost", err)
		}
	})
}

func TestKeepLostOnRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 3*time.Second)
		start := time.Now()
		s := &scripted{Handle: h, extend: func(context.Context, time.Duration) error { return lock.ErrLost }}
		lease, _ := lock.Keep(t.Context(), s, 3*time.Second)
		<-lease.Context().Done()
		if d := time.Since(start); d != time.Second {
			t.Fatalf("lease ended after %v, want at the first renewal (1 s)", d)
		}
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("cause %v, want ErrLost", lease.Err())
		}
		if s.extends.Load() != 1 {
			t.Fatalf("Extend called %d times after ErrLost, want 1", s.extends.Load())
		}
		_ = lease.Release(t.Context())
	})
}

func TestKeepLostWhenTheBackendSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", time.Minute)
		lease, _ := lock.Keep(t.Context(), h, time.Minute)
		time.Sleep(time.Second)
		if _, err := l.ForceRelease(t.Context(), "k"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("lease not lost at once after a forced release: %v", context.Cause(lease.Context()))
		}
		if err := lease.Release(t.Context()); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Release of a lost lease: %v, want ErrLost", err)
		}
	})
}

// Release must wait for an in-flight renewal before it releases: a renewal
// landing after the release would otherwise resurrect nothing, but a backend
// that re-acquired on Extend would hold the key again.
func TestKeepReleaseWaitsForRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 3*time.Second)
		var mu sync.Mutex
		var events []string
		unblock := make(chan struct{})
		s := &scripted{Handle: h, extend: func(ctx context.Context, ttl time.Duration) error {
			<-unblock
			mu.Lock()
			events = append(events, "extend")
			mu.Unlock()
			return h.Extend(ctx, ttl)
		}}
		rec := &recordRelease{Handle: s, mu: &mu, events: &events}
		lease, _ := lock.Keep(t.Context(), rec, 3*time.Second)
		time.Sleep(time.Second) // the renewal starts and blocks
		synctest.Wait()
		done := make(chan error)
		go func() { done <- lease.Release(context.Background()) }()
		synctest.Wait()
		mu.Lock()
		if len(events) != 0 {
			t.Fatalf("events before the renewal finished: %v", events)
		}
		mu.Unlock()
		close(unblock)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(events) != 2 || events[0] != "extend" || events[1] != "release" {
			t.Fatalf("events %v, want [extend release]", events)
		}
	})
}

type recordRelease struct {
	lock.Handle
	mu     *sync.Mutex
	events *[]string
}

func (r *recordRelease) Release(ctx context.Context) error {
	r.mu.Lock()
	*r.events = append(*r.events, "release")
	r.mu.Unlock()
	return r.Handle.Release(ctx)
}

func TestKeepGoesOnAfterParentContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 3*time.Second)
		ctx, cancel := context.WithCancel(t.Context())
		lease, _ := lock.Keep(ctx, h, 3*time.Second)
		cancel()
		time.Sleep(10 * time.Second) // the work winds down; the grant stays ours
		if lease.Err() != nil {
			t.Fatalf("lease lost after the parent ended: %v", lease.Err())
		}
		if !errors.Is(lease.Context().Err(), context.Canceled) {
			t.Fatalf("lease context should follow its parent: %v", lease.Context().Err())
		}
		if _, err := testkit.Must(l.Share()).TryAcquire(t.Context(), "k", time.Second); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("key free before Release: %v", err)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestKeepRejectsBadInput(t *testing.T) {
	l := testkit.Must(memlock.New())
	h, _ := l.TryAcquire(t.Context(), "k", time.Second)
	defer h.Release(t.Context())
	var nilCtx context.Context
	for name, fn := range map[string]func() error{
		"nil context":   func() error { _, err := lock.Keep(nilCtx, h, time.Second); return err },
		"nil handle":    func() error { _, err := lock.Keep(t.Context(), nil, time.Second); return err },
		"zero ttl":      func() error { _, err := lock.Keep(t.Context(), h, 0); return err },
		"zero interval": func() error { _, err := lock.Keep(t.Context(), h, time.Second, lock.WithRenewInterval(0)); return err },
		"nil option":    func() error { _, err := lock.Keep(t.Context(), h, time.Second, nil); return err },
	} {
		if err := fn(); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestKeepStepsDownWithItsMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 15*time.Second)
		validUntil := h.ValidUntil()
		s := &scripted{Handle: h, extend: func(context.Context, time.Duration) error {
			return backendkit.Unavailable("extend", errors.New("timeout"))
		}}
		lease, err := lock.Keep(t.Context(), s, 15*time.Second, lock.WithMargin(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Context().Done()
		if left := time.Until(validUntil); left != 5*time.Second {
			t.Fatalf("stepped down with %v of validity left, want the 5 s margin", left)
		}
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("cause %v", lease.Err())
		}
		_ = lease.Release(t.Context())
		if _, err := lock.Keep(t.Context(), h, time.Second, lock.WithMargin(time.Second)); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("margin ≥ ttl: %v", err)
		}
	})
}

func TestHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 3*time.Second)
		err := lock.Hold(t.Context(), h, 3*time.Second, func(ctx context.Context) error {
			if tok, _ := lock.TokenFrom(ctx); tok != h.Token() {
				t.Errorf("token %d in fn's context, want %d", tok, h.Token())
			}
			time.Sleep(10 * time.Second) // renewed meanwhile
			return ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := testkit.Must(l.Share()).TryAcquire(t.Context(), "k", time.Second); err != nil {
			t.Fatalf("not released after Hold: %v", err)
		}
		var nilCtx context.Context
		if err := lock.Hold(nilCtx, h, time.Second, func(context.Context) error { return nil }); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("Hold(nil ctx): %v", err)
		}
	})
}

// TestKeepRenewalAllocations bounds what one renewal allocates (the loop,
// the renewal's context and Extend on memlock, which allocates nothing
// itself; scripted hides memlock's LossNotifier, as redislock's handles
// have none) and counts the goroutines a lease runs between renewals.
// Before the loop ran Extend itself and the validity deadline became one
// timer function per lease (expire), a renewal took 7 allocations (a
// goroutine, its closure and a channel for Extend, and the context) and
// ran 2 goroutines; now 4, all of them the context.WithDeadline that the
// call needs (drivers that honour contexts read its deadline), on 1.
func TestKeepRenewalAllocations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, err := l.TryAcquire(t.Context(), "k", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := &scripted{Handle: h}
		before := runtime.NumGoroutine()
		lease, err := lock.Keep(t.Context(), s, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := runtime.NumGoroutine() - before; n != 1 {
			t.Errorf("a lease runs %d goroutines, want 1", n)
		}
		const renewals = 1000
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		time.Sleep(renewals * time.Second)
		synctest.Wait()
		runtime.ReadMemStats(&m1)
		if n := s.extends.Load(); n != renewals {
			t.Fatalf("%d renewals, want %d", n, renewals)
		}
		per := float64(m1.Mallocs-m0.Mallocs) / renewals
		const limit = 4.05 // 4, and a few allocations of the run's own
		t.Logf("%.2f allocations per renewal (bound %.2f)", per, limit)
		if per > limit {
			t.Errorf("%.2f allocations per renewal, want at most %.2f", per, limit)
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// Keep of a handle already past its ValidUntil less the margin (2.5 s into
// a 3 s grant with a margin of 1 s, or a grant expired and taken by
// another holder) returns a lease already lost, and Hold never gives fn a
// live context on it. The expiry timer's function ran a moment later on
// another goroutine: the lease came back live, and fn started on a grant
// another holder had.
func TestKeepOfAHandlePastItsDeadlineIsLostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		opts := []lock.Option{lock.WithRenewInterval(time.Second), lock.WithMargin(time.Second)}
		lease := keepWithinTheMargin(t, l, func(h lock.Handle) (*lock.Lease, error) {
			return lock.Keep(t.Context(), h, 3*time.Second, opts...)
		})
		_ = lease.Release(t.Context())
		live, err := holdATakenGrant(t, l, func(h lock.Handle, fn func(context.Context) error) error {
			return lock.Hold(t.Context(), h, 3*time.Second, fn, opts...)
		})
		if live || !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Hold of a grant another holder took: fn's context live %v, Hold returned %v; want a cancelled context and ErrLost", live, err)
		}
	})
}

// keepWithinTheMargin keeps, through keep, a 3 s grant of l 2.5 s after it
// was made (with a margin of 1 s, it is past its deadline), and checks that
// the lease comes back lost.
func keepWithinTheMargin(t *testing.T, l *memlock.Lock, keep func(lock.Handle) (*lock.Lease, error)) *lock.Lease {
	t.Helper()
	h := testkit.Must(l.TryAcquire(t.Context(), "margin", 3*time.Second))
	time.Sleep(2500 * time.Millisecond)
	lease, err := keep(h)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(lease.Context()), lock.ErrLost) || !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("Keep within the margin: the lease's context ends with %v, Err %v; want ErrLost at once",
			context.Cause(lease.Context()), lease.Err())
	}
	return lease
}

// holdATakenGrant holds, through hold, a 3 s grant of l that expired and
// that another holder then took, and reports whether fn's context was live
// when fn started, and hold's error.
func holdATakenGrant(t *testing.T, l *memlock.Lock, hold func(lock.Handle, func(context.Context) error) error) (live bool, err error) {
	h := testkit.Must(l.TryAcquire(t.Context(), "taken", 3*time.Second))
	time.Sleep(4 * time.Second)
	other := testkit.Must(testkit.Must(l.Share()).TryAcquire(t.Context(), "taken", 3*time.Second))
	defer other.Release(context.Background())
	err = hold(h, func(ctx context.Context) error {
		live = ctx.Err() == nil
		return nil
	})
	return live, err
}

// Do, Hold and Keeper.Hold release the grant when fn panics, and the panic
// goes on to the caller. The release was skipped: a caller that recovered
// (a supervisor, net/http) left the renewal keeping the grant for ever.
func TestHoldReleasesWhenFnPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(l, 3*time.Second))
		defer k.Close(context.Background())
		bug := func(context.Context) error { panic("bug in fn") }
		for name, call := range map[string]func(){
			"Do": func() { _ = lock.Do(t.Context(), l, "Do", bug, lock.WithTTL(3*time.Second)) },
			"Hold": func() {
				_ = lock.Hold(t.Context(), testkit.Must(l.TryAcquire(t.Context(), "Hold", 3*time.Second)), 3*time.Second, bug)
			},
			"Keeper.Hold": func() {
				_ = k.Hold(t.Context(), testkit.Must(l.TryAcquire(t.Context(), "Keeper.Hold", 3*time.Second)), bug)
			},
		} {
			var panicked any
			func() {
				defer func() { panicked = recover() }()
				call()
			}()
			if panicked != "bug in fn" {
				t.Errorf("%s: panic %v, want fn's", name, panicked)
			}
			if h, err := testkit.Must(l.Share()).TryAcquire(t.Context(), name, time.Second); err != nil {
				t.Errorf("%s: the key is still held after fn panicked: %v", name, err)
				// End the renewal, so that the bubble can end.
				_, _ = l.ForceRelease(context.Background(), name)
			} else {
				_ = h.Release(t.Context())
			}
		}
		if n := k.Len(); n != 0 {
			t.Errorf("the Keeper holds %d leases after Keeper.Hold's fn panicked, want 0", n)
		}
	})
}
