package lock_test

import (
	"context"
	"errors"
	"github.com/leasehold-go/leasehold/internal/testkit"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// pollingOnly hides memlock's Waiter, as a backend without notifications.
type pollingOnly struct{ l lock.Lock }

func (p pollingOnly) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return p.l.TryAcquire(ctx, key, ttl)
}

func TestAcquireWakesAtTheReleaseInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", time.Hour)
		got := make(chan time.Time)
		go func() {
			hb, err := lock.Acquire(t.Context(), testkit.Must(l.Share()), "k", time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- time.Now()
			_ = hb.Release(context.Background())
		}()
		time.Sleep(5 * time.Second)
		synctest.Wait() // the waiter is blocked
		released := time.Now()
		_ = h.Release(t.Context())
		if at := <-got; !at.Equal(released) {
			t.Fatalf("waiter acquired %v after the release; a notification must wake it at once", at.Sub(released))
		}
	})
}

func TestAcquireRetriesWhenTheHolderCrashed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", 10*time.Second) // never released
		start := time.Now()
		hb, err := lock.Acquire(t.Context(), testkit.Must(l.Share()), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		late := time.Since(start) - 10*time.Second
		if late < 0 || late > 25*time.Millisecond {
			t.Fatalf("acquired %v after the expiry; the remaining-ttl hint bounds it by 25 ms", late)
		}
		if hb.Token() <= h.Token() {
			t.Fatalf("token %d after %d", hb.Token(), h.Token())
		}
	})
}

func TestAcquireWithoutWaiterBacksOffWithinBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, _ := l.TryAcquire(t.Context(), "k", time.Hour)
		var attempts atomic.Int32
		p := countingLock{pollingOnly{testkit.Must(l.Share())}, &attempts}
		got := make(chan time.Time)
		go func() {
			hb, err := lock.Acquire(t.Context(), p, "k", time.Minute, lock.WithBackoff(10*time.Millisecond, 200*time.Millisecond))
			if err != nil {
				t.Error(err)
			}
			got <- time.Now()
			_ = hb.Release(context.Background())
		}()
		time.Sleep(10 * time.Second)
		// Doubling from 10 ms to a 200 ms cap: at most 10 s / 100 ms + 5 attempts.
		if n := attempts.Load(); n < 10*1000/200 || n > 10*1000/100+5 {
			t.Fatalf("%d attempts in 10 s with backoff 10..200 ms", n)
		}
		released := time.Now()
		_ = h.Release(t.Context())
		if d := (<-got).Sub(released); d > 200*time.Millisecond {
			t.Fatalf("acquired %v after the release, more than the max backoff", d)
		}
	})
}

func TestAcquireWithoutWaiterUsesTheHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		_, _ = l.TryAcquire(t.Context(), "k", 150*time.Millisecond)
		start := time.Now()
		_, err := lock.Acquire(t.Context(), pollingOnly{testkit.Must(l.Share())}, "k", time.Minute, lock.WithBackoff(time.Second, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Fatalf("acquired after %v: the 150 ms remaining ttl must bound a 1 s backoff", d)
		}
	})
}

type countingLock struct {
	lock.Lock
	n *atomic.Int32
}

func (c countingLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	c.n.Add(1)
	return c.Lock.TryAcquire(ctx, key, ttl)
}

// flaky fails with ErrUnavailable a few times before it works.
type flaky struct {
	lock.Lock
	failures atomic.Int32
}

func (f *flaky) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, backendkit.Unavailable("acquire", errors.New("connection refused"))
	}
	return f.Lock.TryAcquire(ctx, key, ttl)
}

func TestAcquireRetriesAnUnavailableBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{Lock: testkit.Must(memlock.New())}
		f.failures.Store(3)
		h, err := lock.Acquire(t.Context(), f, "k", time.Minute)
		if err != nil {
			t.Fatalf("Acquire after 3 transient failures: %v", err)
		}
		_ = h.Release(t.Context())
	})
}

func TestAcquireEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		_, _ = l.TryAcquire(t.Context(), "k", time.Hour)
		ctx, cancel := context.WithTimeoutCause(t.Context(), time.Second, errors.New("shutting down"))
		defer cancel()
		other := testkit.Must(l.Share())
		_, err := lock.Acquire(ctx, struct {
			lock.Lock
			lock.Waiter
		}{other, other}, "k", time.Minute) // the path of a Waiter that has no Queue
		if !errors.Is(err, lock.ErrNotAcquired) || !strings.Contains(err.Error(), "shutting down") {
			t.Fatalf("Acquire at its deadline: %v; want the cause and ErrNotAcquired", err)
		}
		qctx, qcancel := context.WithTimeoutCause(t.Context(), time.Second, errors.New("shutting down"))
		defer qcancel()
		if _, err := lock.Acquire(qctx, other, "k", time.Minute); !strings.Contains(err.Error(), "shutting down") {
			t.Fatalf("Acquire in a queue at its deadline: %v; want the cause", err)
		}
		f := &flaky{Lock: testkit.Must(l.Share())}
		f.failures.Store(1 << 30)
		ctx2, cancel2 := context.WithTimeout(t.Context(), time.Second)
		defer cancel2()
		if _, err := lock.Acquire(ctx2, f, "other", time.Minute); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("Acquire on a backend that stays down: %v", err)
		}
	})
}

func TestDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		var token uint64
		err := lock.Do(t.Context(), l, "k", func(ctx context.Context) error {
			token, _ = lock.TokenFrom(ctx)
			if _, err := testkit.Must(l.Share()).TryAcquire(ctx, "k", time.Second); !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("key free inside Do: %v", err)
			}
			time.Sleep(time.Minute) // past the 30 s default ttl: Keep renews
			return ctx.Err()
		})
		if err != nil || token == 0 {
			t.Fatalf("Do: %v, token %d", err, token)
		}
		if h, err := testkit.Must(l.Share()).TryAcquire(t.Context(), "k", time.Second); err != nil || h.Token() <= token {
			t.Fatalf("after Do the key must be free: %v", err)
		}
		boom := errors.New("boom")
		if err := lock.Do(t.Context(), l, "k2", func(context.Context) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("Do returned %v, want fn's error", err)
		}
	})
}

func TestDoReportsALossEvenIfFnIgnoresIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		err := lock.Do(t.Context(), l, "k", func(ctx context.Context) error {
			_, _ = l.ForceRelease(ctx, "k")
			time.Sleep(time.Second)
			return nil
		}, lock.WithTTL(10*time.Second))
		if !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Do after a loss: %v, want ErrLost", err)
		}
	})
}

func TestDoReleasesAfterItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx, cancel := context.WithCancel(t.Context())
		_ = lock.Do(ctx, l, "k", func(ctx context.Context) error { cancel(); return nil })
		if h, err := testkit.Must(l.Share()).TryAcquire(t.Context(), "k", time.Second); err != nil {
			t.Fatalf("key not released after Do with a cancelled context: %v", err)
		} else {
			_ = h.Release(t.Context())
		}
	})
}

func TestHealthCheck(t *testing.T) {
	d, err := lock.HealthCheck(t.Context(), testkit.Must(memlock.New()))
	if err != nil || d <= 0 {
		t.Fatalf("HealthCheck: %v, %v", d, err)
	}
	if _, err := lock.HealthCheck(t.Context(), nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("HealthCheck(nil): %v", err)
	}
}

func TestFence(t *testing.T) {
	var f lock.Fence
	var writes int
	for _, tok := range []uint64{3, 3, 5} {
		if err := f.Do(tok, func() { writes++ }); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
	if err := f.Do(4, func() { writes++ }); !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("stale token: %v", err)
	}
	if writes != 3 || f.Highest() != 5 {
		t.Fatalf("writes %d highest %d", writes, f.Highest())
	}
}

// subscribeFailsOnCancel is a Waiter whose Subscribe, as etcdlock's watch
// did, reports its stream closing when the caller's context is cancelled
// while it subscribes.
type subscribeFailsOnCancel struct {
	lock.Lock
	cancel context.CancelFunc
}

func (s subscribeFailsOnCancel) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	s.cancel()
	<-ctx.Done()
	return nil, backendkit.Unavailable("watch", errors.New("watch closed before it was created"))
}

// The CI failure of TestConformance/CancelStorm on etcd: a cancelled
// Acquire returned the backend's ErrUnavailable instead of its context's
// error.
func TestAcquireCancelledWhileSubscribingReportsTheCancellation(t *testing.T) {
	l := testkit.Must(memlock.New())
	_, _ = l.TryAcquire(t.Context(), "k", time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := lock.Acquire(ctx, subscribeFailsOnCancel{testkit.Must(l.Share()), cancel}, "k", time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled during Subscribe: %v; want context.Canceled", err)
	}
}
