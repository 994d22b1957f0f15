package lock

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// GroupLock is implemented by backends that grant every key of a set, or
// none, in one round trip: an all-of grant, to lock "order 42 and customer
// 7" together. No attempt ever holds part of a set, so waiting for sets
// cannot deadlock, however the sets of different callers overlap.
type GroupLock interface {
	Lock
	// TryAcquireAll takes every key of keys exclusively for ttl if none is
	// held, and returns ErrNotAcquired (a *NotAcquiredError naming a held
	// key, whose Remaining is the longest remaining ttl among the held
	// keys: when they may all be free) otherwise, holding none. keys must
	// be distinct; at most the backend's Limits().MaxGroupKeys of them.
	TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (Group, error)
}

// Group is the grant of every key of one TryAcquireAll. Each key's grant
// has its own fencing token, as if it had been acquired alone; the keys
// share one ttl and are extended and released together.
type Group interface {
	// Keys are the keys as the caller passed them, in that order.
	Keys() []string
	// Tokens are the keys' fencing tokens, in the order of Keys.
	Tokens() []uint64
	// ValidUntil is the group's conservative local deadline, as a
	// Handle's.
	ValidUntil() time.Time
	// Extend renews every key for ttl from now in one round trip. It
	// returns nil (every key renewed), ErrLost (some key's grant is gone:
	// the group is no longer whole; call Release for the keys that may
	// still be held, which a backend whose grants share a session, as
	// pglock's, has freed already), or another error (unknown, as for a
	// Handle).
	Extend(ctx context.Context, ttl time.Duration) error
	// Release gives every key up in one round trip, acting only on this
	// group's grants. It returns ErrLost if some key's grant was gone
	// (the others are released all the same); a second Release returns
	// ErrLost.
	Release(ctx context.Context) error
}

// AcquireAll blocks until it holds every key of keys for ttl or ctx ends.
// It subscribes to every key's releases (on a Waiter) and tries the whole
// set again when one is released, or when the longest remaining ttl that a
// failed attempt reported has passed. Two callers whose sets overlap both
// finish: neither ever holds a part of its set while it waits.
func AcquireAll(ctx context.Context, l GroupLock, keys []string, ttl time.Duration, opts ...Option) (Group, error) {
	cfg, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return acquireAll(ctx, cfg, l, keys, ttl)
}

func acquireAll(ctx context.Context, cfg *options, l GroupLock, keys []string, ttl time.Duration) (Group, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil GroupLock", ErrInvalidArgument)
	}
	if err := validateGroup(ctx, keys, ttl, LimitsOf(l)); err != nil {
		return nil, err
	}
	h, err := acquireWith(ctx, cfg, Lock(l), keys, func(ctx context.Context) (Handle, error) {
		g, err := l.TryAcquireAll(ctx, keys, ttl)
		if err != nil {
			return nil, err
		}
		return groupHandle{g}, nil
	})
	if err != nil {
		return nil, err
	}
	return h.(groupHandle).Group, nil
}

// DoAll runs fn while holding every key of keys: AcquireAll, keeping the
// group alive (as Keep does a Handle), fn, Release, with Do's rules for
// fn's context and for the returned error. fn's context carries the first
// key's token (TokenFrom); the Group has every key's.
func DoAll(ctx context.Context, l GroupLock, keys []string, fn func(ctx context.Context, g Group) error, opts ...Option) error {
	cfg, err := newOptions(opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	g, err := acquireAll(ctx, cfg, l, keys, cfg.ttl)
	if err != nil {
		return err
	}
	return hold(ctx, cfg, groupHandle{g}, cfg.ttl, func(ctx context.Context) error { return fn(ctx, g) })
}

// validateGroup checks the arguments of a TryAcquireAll against lim (for
// backendkit.ValidateGroup too): the context, at least one key and at most
// lim.MaxKeys, each valid and none twice, and the ttl.
func validateGroup(ctx context.Context, keys []string, ttl time.Duration, lim Limits) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if n := lim.MaxGroupKeys; n > 0 && len(keys) > n {
		return fmt.Errorf("%w: %d keys in one all-of grant, this backend's maximum is %d (Limits.MaxGroupKeys)", ErrInvalidKey, len(keys), n)
	}
	if err := lim.CheckKeys(keys); err != nil {
		return err
	}
	if err := lim.CheckTTL(ttl); err != nil {
		return err
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%w: key %q appears twice in one all-of grant", ErrInvalidArgument, k)
		}
		seen[k] = struct{}{}
	}
	return nil
}

// groupHandle lets the helpers (the waiting loop, Keep) treat a Group as a
// Handle: its key is the keys joined by commas, its token the first key's.
type groupHandle struct{ Group }

func (g groupHandle) Key() string   { return strings.Join(g.Keys(), ",") }
func (g groupHandle) Token() uint64 { return g.Tokens()[0] }

// Limits passes the group's own limits on to Keep, when it states them.
func (g groupHandle) Limits() Limits { return LimitsOf(g.Group) }
