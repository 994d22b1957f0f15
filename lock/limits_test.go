package lock_test

import (
	"context"
	"errors"
	"github.com/leasehold-go/leasehold/internal/testkit"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// limited is a backend that states Limits and, unless lax, enforces them
// in TryAcquire, with only the plain lock.Lock interface. A lax one leaves
// the checks to the helpers, which must make them before they call it.
type limited struct {
	l   lock.Lock
	lim lock.Limits
	lax bool
}

func (b limited) Limits() lock.Limits { return b.lim }

func (b limited) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, b.lim); err != nil && !b.lax {
		return nil, err
	}
	h, err := b.l.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return limitedHandle{h, b.lim}, nil
}

// limitedHandle states its backend's limits for Keep.
type limitedHandle struct {
	lock.Handle
	lim lock.Limits
}

func (h limitedHandle) Limits() lock.Limits { return h.lim }

func (h limitedHandle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := h.lim.CheckTTL(ttl); err != nil {
		return err
	}
	return h.Handle.Extend(ctx, ttl)
}

// memlock states lock.DefaultLimits; every helper refuses a ttl above
// lock.MaxTTL with ErrInvalidTTL, at once.
func TestMaxTTLEverywhere(t *testing.T) {
	l := testkit.Must(memlock.New())
	ctx := t.Context()
	if got := lock.LimitsOf(l); got != lock.DefaultLimits {
		t.Fatalf("memlock limits %+v, want DefaultLimits", got)
	}
	h, err := l.TryAcquire(ctx, "k", lock.MaxTTL)
	if err != nil {
		t.Fatalf("TryAcquire(MaxTTL): %v", err)
	}
	defer h.Release(ctx)
	if got := lock.LimitsOf(h); got != lock.DefaultLimits {
		t.Fatalf("memlock handle limits %+v, want DefaultLimits", got)
	}
	fn := func(context.Context) error { return nil }
	for _, ttl := range []time.Duration{lock.MaxTTL + 1, math.MaxInt64} {
		for name, call := range map[string]func() error{
			"TryAcquire":    func() error { _, err := l.TryAcquire(ctx, "k2", ttl); return err },
			"TryAcquireAny": func() error { _, err := l.TryAcquireAny(ctx, []string{"k2"}, ttl); return err },
			"Extend":        func() error { return h.Extend(ctx, ttl) },
			"Acquire":       func() error { _, err := lock.Acquire(ctx, l, "k2", ttl); return err },
			"Claim":         func() error { _, err := lock.Claim(ctx, l, "k2", ttl); return err },
			"Do":            func() error { return lock.Do(ctx, l, "k2", fn, lock.WithTTL(ttl)) },
			"Keep":          func() error { _, err := lock.Keep(ctx, h, ttl); return err },
			"Hold":          func() error { return lock.Hold(ctx, limitedHandle{h, lock.DefaultLimits}, ttl, fn) },
		} {
			if err := call(); !errors.Is(err, lock.ErrInvalidTTL) {
				t.Errorf("%s(%v): %v, want ErrInvalidTTL", name, ttl, err)
			}
		}
	}
}

// A backend's own (smaller) limits are checked by the helpers before the
// backend is called: lock.Claim's TryAcquire fallback, Acquire and Do.
func TestHelpersCheckTheBackendsLimits(t *testing.T) {
	b := limited{testkit.Must(memlock.New()), lock.Limits{MinTTL: time.Second, MaxTTL: time.Hour, MaxKeys: 2}, true}
	ctx := t.Context()
	fn := func(context.Context) error { return nil }
	for name, call := range map[string]func() error{
		"Claim above":   func() error { _, err := lock.Claim(ctx, b, "k", 2*time.Hour); return err },
		"Claim below":   func() error { _, err := lock.Claim(ctx, b, "k", time.Millisecond); return err },
		"Acquire above": func() error { _, err := lock.Acquire(ctx, b, "k", 2*time.Hour); return err },
		"Do above":      func() error { return lock.Do(ctx, b, "k", fn, lock.WithTTL(2*time.Hour)) },
	} {
		if err := call(); !errors.Is(err, lock.ErrInvalidTTL) {
			t.Errorf("%s: %v, want ErrInvalidTTL", name, err)
		}
	}
	var nilCtx context.Context
	if _, err := lock.Claim(nilCtx, b, "k", time.Minute); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Claim(nil ctx): %v", err)
	}
}

// HealthCheck's probe takes at least the backend's minimum ttl (an etcd or
// third-party backend may refuse 5 s), and a nil context is refused before
// the backend is called.
func TestHealthCheckRespectsMinTTL(t *testing.T) {
	b := limited{testkit.Must(memlock.New()), lock.Limits{MinTTL: 10 * time.Second}, false}
	if _, err := lock.HealthCheck(t.Context(), b); err != nil {
		t.Fatalf("HealthCheck on a backend with a 10 s minimum ttl: %v", err)
	}
	var nilCtx context.Context
	if _, err := lock.HealthCheck(nilCtx, testkit.Must(memlock.New())); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("HealthCheck(nil ctx): %v", err)
	}
}

// Keep refuses a ttl below the handle's minimum (its renewals would all be
// refused) and above its maximum, and a renew interval that is not below
// the ttl (less the margin): the grant would lapse between renewals.
func TestKeepLimits(t *testing.T) {
	l := testkit.Must(memlock.New())
	ctx := t.Context()
	h, err := l.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	strict := limitedHandle{h, lock.Limits{MinTTL: 10 * time.Millisecond}}
	for name, c := range map[string]struct {
		want error
		fn   func() (*lock.Lease, error)
	}{
		"ttl below the minimum": {lock.ErrInvalidTTL, func() (*lock.Lease, error) { return lock.Keep(ctx, strict, time.Millisecond) }},
		"ttl above MaxTTL":      {lock.ErrInvalidTTL, func() (*lock.Lease, error) { return lock.Keep(ctx, h, lock.MaxTTL+1) }},
		"interval = ttl": {lock.ErrInvalidArgument, func() (*lock.Lease, error) {
			return lock.Keep(ctx, h, time.Minute, lock.WithRenewInterval(time.Minute))
		}},
		"interval > ttl": {lock.ErrInvalidArgument, func() (*lock.Lease, error) {
			return lock.Keep(ctx, h, time.Minute, lock.WithRenewInterval(time.Hour))
		}},
		// A nanosecond period renewed in a busy loop against the backend.
		"interval below MinRenewInterval": {lock.ErrInvalidArgument, func() (*lock.Lease, error) {
			return lock.Keep(ctx, h, time.Minute, lock.WithRenewInterval(time.Nanosecond))
		}},
		"ttl/3 below MinRenewInterval": {lock.ErrInvalidArgument, func() (*lock.Lease, error) {
			return lock.Keep(ctx, h, 2*time.Nanosecond)
		}},
		"interval ≥ ttl - margin": {lock.ErrInvalidArgument, func() (*lock.Lease, error) {
			return lock.Keep(ctx, h, time.Minute, lock.WithRenewInterval(40*time.Second), lock.WithMargin(20*time.Second))
		}},
	} {
		lease, err := c.fn()
		if lease != nil {
			_ = lease.Release(context.WithoutCancel(ctx))
			t.Fatalf("%s: Keep made a lease", name)
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	lease, err := lock.Keep(ctx, strict, 10*time.Millisecond)
	if err != nil {
		t.Fatalf("Keep at the minimum ttl: %v", err)
	}
	_ = lease.Release(ctx)
}

// A renewal that the backend refuses as invalid input ends the lease at
// once (cause ErrLost, wrapping the refusal), instead of retrying the same
// refused call until ValidUntil.
func TestKeepEndsOnARefusedRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		h, err := l.TryAcquire(t.Context(), "k", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var extends atomic.Int32
		s := &scripted{Handle: h, extend: func(context.Context, time.Duration) error {
			extends.Add(1)
			return errors.Join(errors.New("server says no"), lock.ErrInvalidTTL)
		}}
		start := time.Now()
		lease, err := lock.Keep(t.Context(), s, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Context().Done()
		if d := time.Since(start); d != time.Second {
			t.Fatalf("lease ended %v after Keep, want at the first renewal (1 s), not at ValidUntil", d)
		}
		cause := context.Cause(lease.Context())
		if !errors.Is(cause, lock.ErrLost) || !errors.Is(cause, lock.ErrInvalidTTL) {
			t.Fatalf("cause %v, want ErrLost wrapping the refusal", cause)
		}
		if n := extends.Load(); n != 1 {
			t.Fatalf("%d renewals, want 1", n)
		}
		_ = lease.Release(t.Context())
	})
}

// alwaysHeld reports its key held, with a hint, forever.
type alwaysHeld struct{}

func (alwaysHeld) TryAcquire(context.Context, string, time.Duration) (lock.Handle, error) {
	return nil, backendkit.NotAcquired("k", time.Second)
}

// Backoff bounds of any size: the doubling used to overflow into a
// negative delay and panic (rand.N) at the second retry.
func TestHugeBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := lock.Acquire(ctx, alwaysHeld{}, "k", time.Minute, lock.WithBackoff(math.MaxInt64, math.MaxInt64))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire: %v, want the context's deadline", err)
		}
	})
}

// Common.Owner follows CheckOwner: an owner with a control character (it is
// stored in records and printed on lines) is refused, with an error that
// names the package that refused it. An empty one means a fresh NewOwner.
func TestCommonOwnerFollowsCheckOwner(t *testing.T) {
	for _, owner := range []string{"a\nb", "a\x1eb", "\xff", string(make([]byte, lock.MaxKeyLen+1))} {
		if _, err := memlock.New(memlock.WithCommon(lock.Common{Owner: owner})); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Owner %.20q: %v, want ErrInvalidArgument", owner, err)
		} else if !strings.HasPrefix(err.Error(), "memlock: invalid argument: ") {
			t.Errorf("Owner %.20q: %q does not name memlock", owner, err)
		}
	}
	if l, err := memlock.New(memlock.WithCommon(lock.Common{})); err != nil || l.Owner() == "" {
		t.Errorf("empty Owner: %v, owner %q, want a fresh one", err, l.Owner())
	}
	if _, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host/1/é"})); err != nil {
		t.Errorf("Owner of a plain identity: %v", err)
	}
}
