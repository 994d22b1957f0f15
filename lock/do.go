package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs fn while holding key: Acquire (blocking), Keep, fn, Release.
//
// fn's context carries the grant's fencing token (TokenFrom) and is
// cancelled, with a cause matching ErrLost, when the grant can no longer be
// trusted; fn should stop then. Do returns fn's error; if the grant was lost
// while fn ran, the returned error also matches ErrLost, even if fn returned
// nil, because fn's work may have overlapped another holder's (that is what
// fencing tokens are for). If fn panics (or calls runtime.Goexit), the
// grant is released before the panic goes on up the stack. The lease ttl
// is WithTTL (default 30 s).
func Do(ctx context.Context, l Lock, key string, fn func(ctx context.Context) error, opts ...Option) error {
	cfg, err := newOptions(opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	h, err := acquire(ctx, cfg, l, key, cfg.ttl)
	if err != nil {
		return err
	}
	return hold(ctx, cfg, h, cfg.ttl, fn)
}

// Hold runs fn while keeping h alive: Keep, fn, Release. It is Do for a
// grant that is already held (a semaphore permit, a leader's term), with
// the same rules for fn's context and the returned error.
func Hold(ctx context.Context, h Handle, ttl time.Duration, fn func(ctx context.Context) error, opts ...Option) error {
	cfg, err := newOptions(opts)
	if err != nil {
		return err
	}
	if fn == nil || ctx == nil {
		return fmt.Errorf("%w: nil function or context", ErrInvalidArgument)
	}
	return hold(ctx, cfg, h, ttl, fn)
}

func hold(ctx context.Context, cfg *options, h Handle, ttl time.Duration, fn func(ctx context.Context) error) error {
	lease, err := keep(ctx, cfg, h, ttl)
	if err != nil {
		if h != nil {
			_ = h.Release(context.WithoutCancel(ctx))
		}
		return err
	}
	returned := false
	defer func() {
		if !returned {
			// fn panicked (or called runtime.Goexit): release all the
			// same, or the renewal would keep the grant for ever, then let
			// the panic go on.
			_ = releaseAfter(ctx, lease)
		}
	}()
	fnErr := fn(lease.Context())
	returned = true
	lostErr := lease.Err()
	relErr := releaseAfter(ctx, lease)
	switch {
	case lostErr != nil:
		return errors.Join(fnErr, lostErr)
	case relErr != nil && fnErr == nil:
		return fmt.Errorf("lock: releasing %q: %w", h.Key(), relErr)
	}
	return fnErr
}

// releaseAfter releases lease once Hold's fn has ended, even when ctx has
// ended: the grant should not linger for a whole ttl. The release is
// bounded by the time the grant is valid anyway (a Keeper's leases by a
// deadline they share, made about once a ttl).
func releaseAfter(ctx context.Context, lease *Lease) error {
	if rctx := lease.releaseContext(); rctx != nil {
		return lease.Release(rctx)
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), lease.ValidUntil().Add(time.Second))
	defer cancel()
	return lease.Release(rctx)
}

// healthTTL is the ttl of HealthCheck's probe grant, on a backend that is
// not an Inspector.
const healthTTL = 5 * time.Second

// healthKey is the one key HealthCheck probes.
const healthKey = "leasehold/health"

// HealthCheck makes one round trip to the backend and reports how long it
// took: the building block for readiness endpoints. It leaves nothing
// behind, however often it is called: on an Inspector (every built-in
// backend) it reads the grant of the fixed key "leasehold/health"
// (Inspect), which writes nothing; on any other backend it acquires and
// releases that one key (ttl 5 s, or the backend's minimum ttl when that
// is larger), and a refusal because another probe holds it
// (ErrNotAcquired) is an answer, so healthy. Otherwise the error is the
// backend's.
func HealthCheck(ctx context.Context, l Lock) (time.Duration, error) {
	if l == nil {
		return 0, fmt.Errorf("%w: nil Lock", ErrInvalidArgument)
	}
	if err := checkContext(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	if in, ok := l.(Inspector); ok {
		_, _, err := in.Inspect(ctx, healthKey)
		return time.Since(start), err
	}
	lim := LimitsOf(l)
	ttl := min(max(healthTTL, lim.MinTTL), lim.MaxTTL)
	h, err := l.TryAcquire(ctx, healthKey, ttl)
	if errors.Is(err, ErrNotAcquired) {
		return time.Since(start), nil
	}
	if err != nil {
		return time.Since(start), err
	}
	err = h.Release(ctx)
	return time.Since(start), err
}
