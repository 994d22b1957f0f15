package lock

import (
	"context"
	"time"
)

// Lock grants time-bounded, fenced ownership of keys. Implementations are
// safe for concurrent use.
type Lock interface {
	// TryAcquire takes key for ttl if no one holds it, and returns
	// ErrNotAcquired (a *NotAcquiredError) if someone does. It never waits
	// for the key; use Acquire for that.
	TryAcquire(ctx context.Context, key string, ttl time.Duration) (Handle, error)
}

// Handle is one grant of one key.
type Handle interface {
	// Key is the key as the caller passed it.
	Key() string
	// Token is this grant's fencing token: strictly greater than the token
	// of every earlier grant of the same key, never reused.
	Token() uint64
	// ValidUntil is a conservative local deadline: the monotonic clock
	// reading taken before the last successful acquire or extend request
	// was sent, plus its ttl, minus the backend's drift allowance. Until
	// then no other grant of the key can exist, process pauses and server
	// clock jumps aside.
	ValidUntil() time.Time
	// Extend renews the grant for ttl from now. It returns nil (renewed),
	// ErrLost (the grant is gone; it is never re-acquired), or another
	// error (unknown: treat the grant as valid until ValidUntil).
	Extend(ctx context.Context, ttl time.Duration) error
	// Release gives the key up. It acts only on this grant: if the grant is
	// gone it returns ErrLost and leaves any newer holder alone. A second
	// Release returns ErrLost.
	Release(ctx context.Context) error
}

// Waiter is implemented by backends that can announce releases (pub/sub,
// LISTEN/NOTIFY, a watch, a channel). Acquire uses it so that a blocked
// caller wakes when the key is released instead of polling.
type Waiter interface {
	// Subscribe starts listening for releases of keys. Subscribe first,
	// then try the keys: a release that happens after Subscribe returns is
	// never missed.
	Subscribe(ctx context.Context, keys ...string) (Subscription, error)
}

// Subscription is a live interest in the release of some keys.
type Subscription interface {
	// Wait returns nil when one of the keys was released since Subscribe
	// or since the previous Wait returned, or when hint has elapsed
	// (a hint ≤ 0 waits for a notification only); it returns the context's
	// error when ctx ends first.
	Wait(ctx context.Context, hint time.Duration) error
	// Close ends the subscription. It is safe to call more than once.
	Close() error
}

// Queue is implemented by backends that keep a queue of the waiters for a
// key and hand the key to the first of them on release (PostgreSQL's
// advisory locks; redislock keeps a queue in Redis). Acquire uses it for
// one key: no release wakes a herd of waiters that then race, and waiters
// are served in (about) arrival order.
type Queue interface {
	// AcquireQueued waits in the server's queue for key and returns the
	// grant, or fails when ctx ends (then nothing is held) or the backend
	// is unavailable.
	AcquireQueued(ctx context.Context, key string, ttl time.Duration) (Handle, error)
	// Waiting is the number of callers waiting in key's queue now: for
	// operators, and for tests that must know a waiter is queued before
	// they release.
	Waiting(ctx context.Context, key string) (int, error)
}

// Claimer is implemented by backends that can record a one-off claim on a
// key that holds nothing while it lasts: a grant that is never extended
// or released and lapses after its ttl. A backend whose grants hold a
// resource (pglock: a session) implements it so that claims do not hold
// it for their ttl. Timers claim each tick this way. Use Claim, which
// falls back to TryAcquire.
type Claimer interface {
	// Claim takes key for ttl if it is not claimed, and returns the
	// claim's fencing token (greater than every earlier claim's on key);
	// ErrNotAcquired when it is claimed.
	Claim(ctx context.Context, key string, ttl time.Duration) (token uint64, err error)
}

// MultiLock is implemented by backends that can grant the first free key of
// a set in one round trip. The semaphore uses it.
type MultiLock interface {
	// TryAcquireAny takes one free key among keys for ttl, or returns
	// ErrNotAcquired when all are held. Backends start at a random offset
	// so that contenders spread over the keys.
	TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (Handle, error)
}

// Grant describes a current grant, as an Inspector reports it.
type Grant struct {
	Key       string        // the key as its holder passed it
	Owner     string        // the holder's owner identity (Common.Owner)
	Token     uint64        // the grant's fencing token
	Remaining time.Duration // remaining ttl as the backend saw it
	Since     time.Time     // when the grant was made (server time where the backend has one)
	// Shared is true for a shared grant (SharedLock). A key may have many:
	// List reports each of them, Inspect the one that expires first.
	Shared bool
	// Group names the all-of grant (GroupLock) this grant is a part of:
	// the grants of one TryAcquireAll share it. Empty otherwise.
	Group string
}

// Inspector is implemented by backends that can say who holds what.
type Inspector interface {
	// Inspect reports the current grant of key; ok is false when the key
	// is free.
	Inspect(ctx context.Context, key string) (g Grant, ok bool, err error)
	// List reports the current grants of the keys that start with prefix,
	// sorted by key.
	List(ctx context.Context, prefix string) ([]Grant, error)
}

// LossNotifier is implemented by handles whose backend learns of a loss by
// itself (a dropped session, a revoked lease, a takeover). The channel is
// closed when the grant is known to be gone.
type LossNotifier interface {
	// Lost returns a channel that is closed once the backend knows the
	// grant is gone (which events it notices is the backend's to say). An
	// open channel is no promise that the grant is still valid: a grant
	// that merely expires may not close it, and ValidUntil stays the
	// deadline to trust. A wrapper of a handle that has no loss report
	// (semaphore.Permit) returns nil, a channel never closed.
	Lost() <-chan struct{}
}

// Owned is implemented by backends (and by wrappers of them) that have an
// owner identity: the one stored with each of their grants, shown by an
// Inspector as Grant.Owner, and set with the backend's WithCommon. A wrapper that hides
// its backend should implement it too, by passing the call on. Read it
// with backendkit.OwnerOf.
type Owned interface {
	// Owner is the instance's owner identity.
	Owner() string
}
