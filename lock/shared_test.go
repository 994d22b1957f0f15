package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// A blocked AcquireShared wakes at the instant the writer releases, and a
// blocked Acquire (without a queue) at the instant the last share goes.
func TestSharedAndExclusiveWakeEachOtherAtRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(l *memlock.Lock) (lock.Handle, error)
		wait func(ctx context.Context, l *memlock.Lock) (lock.Handle, error)
	}{
		{"reader behind a writer",
			func(l *memlock.Lock) (lock.Handle, error) { return l.TryAcquire(context.Background(), "k", time.Hour) },
			func(ctx context.Context, l *memlock.Lock) (lock.Handle, error) {
				return lock.AcquireShared(ctx, l, "k", time.Minute)
			}},
		{"writer behind a reader",
			func(l *memlock.Lock) (lock.Handle, error) {
				return l.TryAcquireShared(context.Background(), "k", time.Hour)
			},
			func(ctx context.Context, l *memlock.Lock) (lock.Handle, error) {
				return lock.Acquire(ctx, waiterOnly{l}, "k", time.Minute)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := testkit.Must(memlock.New())
				held := testkit.Must(tc.hold(l))
				got := make(chan time.Time, 1)
				go func() {
					h := testkit.Must(tc.wait(t.Context(), testkit.Must(l.Share())))
					got <- time.Now()
					_ = h.Release(context.Background())
				}()
				time.Sleep(lock.IntentTTL / 4) // before the writer's periodic retry
				synctest.Wait()
				released := time.Now()
				_ = held.Release(t.Context())
				if at := <-got; !at.Equal(released) {
					t.Fatalf("granted %v after the release, want at once", at.Sub(released))
				}
			})
		})
	}
}

// A writer that tried once and went away holds readers off for exactly
// lock.IntentTTL; a blocked AcquireShared gets its share then.
func TestAcquireSharedWaitsOutTheIntent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		r, _ := l.TryAcquireShared(t.Context(), "k", time.Hour)
		defer r.Release(context.Background())
		if _, err := testkit.Must(l.Share()).TryAcquire(t.Context(), "k", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("writer beside a share: %v", err)
		}
		marked := time.Now()
		h, err := lock.AcquireShared(t.Context(), testkit.Must(l.Share()), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(context.Background())
		if d := time.Since(marked); d < lock.IntentTTL || d > lock.IntentTTL+50*time.Millisecond {
			t.Fatalf("share granted %v after the writer's attempt, want at IntentTTL (%v) plus jitter", d, lock.IntentTTL)
		}
	})
}

// waiterOnly hides memlock's Queue (and all else but the shared grants and
// the Waiter): Acquire must then retry, at least every IntentTTL/2, so
// that its mark never lapses while it waits.
type waiterOnly struct{ m *memlock.Lock }

func (w waiterOnly) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return w.m.TryAcquire(ctx, key, ttl)
}

func (w waiterOnly) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return w.m.TryAcquireShared(ctx, key, ttl)
}

func (w waiterOnly) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	return w.m.Subscribe(ctx, keys...)
}

func TestAcquireOnASharedLockKeepsItsIntentAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		r, _ := l.TryAcquireShared(t.Context(), "k", time.Hour) // a reader that stays
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var attempts atomic.Int32
		done := make(chan error, 1)
		go func() {
			_, err := lock.Acquire(ctx, counting{waiterOnly{testkit.Must(l.Share())}, &attempts}, "k", time.Minute)
			done <- err
		}()
		reader := testkit.Must(l.Share())
		start := time.Now()
		for range 60 {
			time.Sleep(time.Second)
			if h, err := reader.TryAcquireShared(t.Context(), "k", time.Minute); err == nil {
				_ = h.Release(context.Background())
				t.Fatalf("a new share was granted while a writer waited, %v after the first share", time.Since(start))
			}
		}
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the writer's Acquire: %v, want its deadline", err)
		}
		if n := attempts.Load(); n < int32(time.Minute/(lock.IntentTTL/2)) {
			t.Fatalf("%d attempts in a minute, want at least one every IntentTTL/2 (%v)", n, lock.IntentTTL/2)
		}
		_ = r.Release(context.Background())
	})
}

// counting counts a SharedLock's exclusive attempts.
type counting struct {
	waiterOnly
	n *atomic.Int32
}

func (c counting) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	c.n.Add(1)
	return c.waiterOnly.TryAcquire(ctx, key, ttl)
}

func TestDoShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		other := testkit.Must(l.Share())
		err := lock.DoShared(t.Context(), l, "k", func(ctx context.Context) error {
			tok, ok := lock.TokenFrom(ctx)
			if !ok || tok == 0 {
				t.Errorf("TokenFrom = %d, %v", tok, ok)
			}
			// Shared: another reader gets in, a writer does not; the
			// share is kept past its ttl.
			time.Sleep(3 * lock.DefaultTTL)
			h, err := other.TryAcquireShared(ctx, "k", time.Minute)
			if err != nil {
				return err
			}
			_ = h.Release(ctx)
			if _, err := other.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
				t.Errorf("a writer during DoShared: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.DoShared(t.Context(), l, "k", nil); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("DoShared(nil): %v", err)
		}
	})
}
