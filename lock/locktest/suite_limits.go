package locktest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// maxTTL: the backend's Limits (lock.LimitsOf) hold at every entry point. A
// ttl of MaxTTL is not refused as invalid; MaxTTL plus one nanosecond and
// math.MaxInt64 are refused with ErrInvalidTTL by TryAcquire, Extend (which
// leaves the grant as it was), lock.Claim, lock.Acquire, lock.Keep, and
// AcquireQueued and TryAcquireAny where the backend has them. Nothing is
// converted with an overflow (a negative expiry deletes a key on Redis).
func (s *suite) maxTTL(t *testing.T) {
	a, b := s.newLock(t), s.newLock(t)
	lim := lock.LimitsOf(a)
	ctx := ctxFor(t, s.cfg.waitBound)
	key := s.key(t, "k")

	// The maximum itself is valid input.
	top, err := guardedGrant(t, "TryAcquire(MaxTTL)", s.cfg.waitBound, func() (lock.Handle, error) {
		return a.TryAcquire(ctx, s.key(t, "top"), lim.MaxTTL)
	})
	if errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire with the backend's own MaxTTL %v: %v", lim.MaxTTL, err)
	}
	if top != nil {
		if err := top.Release(ctx); err != nil {
			t.Fatalf("Release of a grant of MaxTTL: %v", err)
		}
	}

	h := s.mustAcquire(t, a, key, s.cfg.longTTL)
	defer h.Release(context.Background())
	for _, ttl := range []time.Duration{lim.MaxTTL + 1, math.MaxInt64} {
		calls := []struct {
			name string
			fn   func() error
		}{
			{"TryAcquire", func() error { return discard(b.TryAcquire(ctx, s.key(t, "other"), ttl)) }},
			{"Extend", func() error { return h.Extend(ctx, ttl) }},
			{"lock.Claim", func() error { _, err := lock.Claim(ctx, b, s.key(t, "claim"), ttl); return err }},
			{"lock.Acquire", func() error { return discard(lock.Acquire(ctx, b, s.key(t, "other"), ttl)) }},
			{"lock.Keep", func() error {
				hk := s.mustAcquire(t, a, s.key(t, "keep"), s.cfg.longTTL)
				lease, err := lock.Keep(ctx, hk, ttl)
				if lease != nil {
					_ = lease.Release(ctx)
					return fmt.Errorf("lock.Keep made a lease of %v", ttl)
				}
				_ = hk.Release(ctx)
				return err
			}},
		}
		if q, ok := b.(lock.Queue); ok {
			calls = append(calls, struct {
				name string
				fn   func() error
			}{"AcquireQueued", func() error { return discard(q.AcquireQueued(ctx, s.key(t, "other"), ttl)) }})
		}
		if m, ok := b.(lock.MultiLock); ok {
			calls = append(calls, struct {
				name string
				fn   func() error
			}{"TryAcquireAny", func() error { return discard(m.TryAcquireAny(ctx, []string{s.key(t, "other")}, ttl)) }})
		}
		for _, c := range calls {
			if err := guarded(t, c.name, s.cfg.waitBound, c.fn); !errors.Is(err, lock.ErrInvalidTTL) {
				t.Errorf("%s with ttl %v (the backend's MaxTTL is %v): %v, want ErrInvalidTTL", c.name, ttl, lim.MaxTTL, err)
			}
		}
		// The refused Extend left the grant alone.
		expectNotAcquired(t, b, key, s.cfg.longTTL, fmt.Sprintf("after Extend(%v) was refused", ttl))
	}
	if err := h.Extend(ctx, s.cfg.longTTL); err != nil {
		t.Fatalf("Extend after the refused ones: %v", err)
	}
}

// maxKeys: TryAcquireAny and Subscribe take exactly the backend's MaxKeys
// keys (lock.LimitsOf); one more is refused with an error matching
// ErrInvalidArgument, never ErrUnavailable (which callers retry forever).
func (s *suite) maxKeys(t *testing.T) {
	probe := s.newLock(t)
	m, multi := probe.(lock.MultiLock)
	w, waiter := probe.(lock.Waiter)
	if !multi && !waiter {
		t.Skipf("%T implements neither lock.MultiLock nor lock.Waiter", probe)
	}
	n := lock.LimitsOf(probe).MaxKeys
	keys := make([]string, n+1)
	for i := range keys {
		// One hash tag, as a semaphore's slots (Redis Cluster).
		keys[i] = s.key(t, fmt.Sprintf("{max}/%d", i))
	}
	ctx := ctxFor(t, time.Minute)
	check := func(what string, err error) {
		t.Helper()
		switch {
		case !errors.Is(err, lock.ErrInvalidArgument):
			t.Errorf("%s with %d keys (MaxKeys %d): %v, want an error matching ErrInvalidArgument", what, n+1, n, err)
		case errors.Is(err, lock.ErrUnavailable):
			t.Errorf("%s with %d keys: %v also matches ErrUnavailable", what, n+1, err)
		}
	}
	if multi {
		h, err := guardedGrant(t, "TryAcquireAny(MaxKeys)", time.Minute, func() (lock.Handle, error) {
			return m.TryAcquireAny(ctx, keys[:n], s.cfg.longTTL)
		})
		if err != nil {
			t.Fatalf("TryAcquireAny with MaxKeys (%d) free keys: %v", n, err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		check("TryAcquireAny", guarded(t, "TryAcquireAny(MaxKeys+1)", s.cfg.waitBound, func() error {
			return discard(m.TryAcquireAny(ctx, keys, s.cfg.longTTL))
		}))
	}
	if waiter {
		sub, err := w.Subscribe(ctx, keys[:n]...)
		if err != nil {
			t.Fatalf("Subscribe to MaxKeys (%d) keys: %v", n, err)
		}
		_ = sub.Close()
		check("Subscribe", guarded(t, "Subscribe(MaxKeys+1)", s.cfg.waitBound, func() error {
			return discardSub(w.Subscribe(ctx, keys...))
		}))
	}
}

// guardedGrant is guarded for a call that returns a grant.
func guardedGrant(t testing.TB, name string, bound time.Duration, fn func() (lock.Handle, error)) (lock.Handle, error) {
	t.Helper()
	var h lock.Handle
	err := guarded(t, name, bound, func() error {
		var err error
		h, err = fn()
		return err
	})
	return h, err
}
