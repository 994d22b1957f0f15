package lock

import (
	"context"
	"fmt"
	"time"
)

// SharedLock is implemented by backends that grant a key shared as well as
// exclusive: a reader-writer lock. Lock's TryAcquire is the exclusive
// grant, and on a SharedLock it excludes every other grant of the key,
// shared or exclusive. TryAcquireShared makes a shared grant: any number of
// them may exist at once, never beside an exclusive one.
//
// Writers are not starved: while a writer waits for the key, no new shared
// grant is made, so the readers that hold it drain and the writer wins. A
// writer waits in the backend's queue (Queue: its place there refuses new
// readers), or attempts again and again (Acquire does, at least every
// IntentTTL/2): each exclusive attempt refused because shared grants exist
// marks the key as wanted by a writer for IntentTTL, and TryAcquireShared
// is refused while the mark lives. So a reader is refused while a writer
// holds the key or waits for it, and for at most IntentTTL after the last
// attempt of a writer that stopped trying (crashed, or gave up); a plain
// TryAcquire that is refused holds readers off that long too.
//
// Tokens: the shared and exclusive grants of a key draw from one counter.
// Every grant's token is larger than the token of every earlier grant of
// the key, shared or exclusive, so a fenced resource that a writer has
// written refuses every reader that came before it (and two readers' tokens
// differ).
//
// A shared grant is a Handle like any other: it has a ttl, Extend, Release
// and ErrLost, Keep keeps it, a LossNotifier reports its loss, and a
// Waiter announces its release (so AcquireShared and Acquire wait for each
// other without polling).
type SharedLock interface {
	Lock
	// TryAcquireShared takes a shared grant of key for ttl unless an
	// exclusive grant holds key or a writer waits for it (then
	// ErrNotAcquired, a *NotAcquiredError whose Remaining is how long
	// that is known to last). It never waits; use AcquireShared for that.
	TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (Handle, error)
}

// IntentTTL is how long a refused exclusive attempt on a SharedLock holds
// new shared grants off: a writer that attempts at least this often is
// never starved by a stream of readers, and one that stops attempting
// stops refusing readers this long after its last attempt.
const IntentTTL = 2 * time.Second

// AcquireShared blocks until it holds a shared grant of key for ttl or ctx
// ends. It waits as Acquire does (release notifications on a Waiter, the
// remaining-ttl hint, backoff otherwise), for the exclusive holder to
// release or the waiting writer to be served.
func AcquireShared(ctx context.Context, l SharedLock, key string, ttl time.Duration, opts ...Option) (Handle, error) {
	cfg, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return acquireShared(ctx, cfg, l, key, ttl)
}

func acquireShared(ctx context.Context, cfg *options, l SharedLock, key string, ttl time.Duration) (Handle, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil SharedLock", ErrInvalidArgument)
	}
	if err := validate(ctx, key, ttl, LimitsOf(l)); err != nil {
		return nil, err
	}
	return acquireWith(ctx, cfg, Lock(l), []string{key}, func(ctx context.Context) (Handle, error) {
		return l.TryAcquireShared(ctx, key, ttl)
	})
}

// DoShared runs fn while holding a shared grant of key: AcquireShared,
// Keep, fn, Release, with Do's rules for fn's context (the grant's token,
// cancelled when the grant is lost) and for the returned error.
func DoShared(ctx context.Context, l SharedLock, key string, fn func(ctx context.Context) error, opts ...Option) error {
	cfg, err := newOptions(opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	h, err := acquireShared(ctx, cfg, l, key, cfg.ttl)
	if err != nil {
		return err
	}
	return hold(ctx, cfg, h, cfg.ttl, fn)
}
