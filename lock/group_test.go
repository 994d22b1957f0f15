package lock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// AcquireAll holds nothing while it waits, and takes the set at the
// instant its last held key is released.
func TestAcquireAllWaitsForEveryKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		a, _ := l.TryAcquire(t.Context(), "a", time.Hour)
		b, _ := l.TryAcquire(t.Context(), "b", time.Hour)
		got := make(chan time.Time, 1)
		go func() {
			g, err := lock.AcquireAll(t.Context(), testkit.Must(l.Share()), []string{"a", "b", "c"}, time.Minute)
			if err != nil {
				t.Error(err)
				close(got)
				return
			}
			got <- time.Now()
			_ = g.Release(context.Background())
		}()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if h, err := l.TryAcquire(t.Context(), "c", time.Minute); err != nil {
			t.Fatalf("the free key of a waiting AcquireAll is held: %v", err)
		} else {
			_ = h.Release(t.Context())
		}
		_ = a.Release(t.Context())
		time.Sleep(5 * time.Second)
		synctest.Wait()
		select {
		case <-got:
			t.Fatalf("AcquireAll returned while b was held")
		default:
		}
		released := time.Now()
		_ = b.Release(t.Context())
		if at := <-got; !at.Equal(released) {
			t.Fatalf("AcquireAll granted %v after the last release, want at once", at.Sub(released))
		}
	})
}

// Keys whose holders crashed: AcquireAll tries again when the longest
// remaining ttl has passed (or sooner: a SharedLock is retried every
// IntentTTL/2), never before it.
func TestAcquireAllRetriesAfterTheLongestRemaining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		_, _ = l.TryAcquire(t.Context(), "a", 10*time.Second)
		_, _ = l.TryAcquire(t.Context(), "b", 20*time.Second)
		start := time.Now()
		g, err := lock.AcquireAll(t.Context(), testkit.Must(l.Share()), []string{"a", "b"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Release(context.Background())
		if d := time.Since(start); d < 20*time.Second || d > 20*time.Second+lock.IntentTTL/2 {
			t.Fatalf("AcquireAll granted after %v, want from 20s to 20s + IntentTTL/2", d)
		}
	})
}

// Two AcquireAll callers whose sets overlap in opposite orders, behind a
// third, both finish, round after round.
func TestAcquireAllOverlappingSetsBothFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		for range 20 {
			blocker, err := l.TryAcquireAll(t.Context(), []string{"b", "c"}, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 2)
			for _, set := range [][]string{{"a", "b", "c"}, {"d", "c", "b"}} {
				go func() {
					g, err := lock.AcquireAll(t.Context(), testkit.Must(l.Share()), set, time.Minute)
					if err == nil {
						time.Sleep(time.Second)
						err = g.Release(context.Background())
					}
					done <- err
				}()
			}
			synctest.Wait()
			_ = blocker.Release(t.Context())
			for range 2 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

func TestDoAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		other := testkit.Must(l.Share())
		keys := []string{"orders/42", "customers/7"}
		err := lock.DoAll(t.Context(), l, keys, func(ctx context.Context, g lock.Group) error {
			if tok, _ := lock.TokenFrom(ctx); tok != g.Tokens()[0] {
				t.Errorf("TokenFrom = %d, want the first key's %d", tok, g.Tokens()[0])
			}
			if !slices.Equal(g.Keys(), keys) {
				t.Errorf("Keys = %q, want %q", g.Keys(), keys)
			}
			time.Sleep(3 * lock.DefaultTTL) // kept past its ttl
			for _, k := range keys {
				if _, err := other.TryAcquire(ctx, k, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
					t.Errorf("%q during DoAll: %v", k, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		g, err := other.TryAcquireAll(t.Context(), keys, time.Minute)
		if err != nil {
			t.Fatalf("the keys after DoAll: %v", err)
		}
		_ = g.Release(t.Context())
		for name, fn := range map[string]func() error{
			"nil fn": func() error { return lock.DoAll(t.Context(), l, keys, nil) },
			"duplicate keys": func() error {
				return lock.DoAll(t.Context(), l, []string{"a", "a"}, func(context.Context, lock.Group) error { return nil })
			},
			"no keys": func() error { _, err := lock.AcquireAll(t.Context(), l, nil, time.Minute); return err },
			"nil GroupLock": func() error {
				_, err := lock.AcquireAll(t.Context(), nil, keys, time.Minute)
				return err
			},
		} {
			if err := fn(); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
		}
	})
}
