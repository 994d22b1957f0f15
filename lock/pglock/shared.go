package pglock

import (
	"context"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// TryAcquireShared implements lock.SharedLock in one round trip on a
// connection of its own, as TryAcquire: pg_try_advisory_lock_shared, so
// any number of shared grants of a key coexist and none beside an
// exclusive one. The token comes from the same sequence as exclusive
// grants' (so it is larger than every earlier grant's), the ttl is the
// session's idle_session_timeout, and the quarantine applies.
//
// It is refused (ErrNotAcquired) while an exclusive grant holds the key;
// while a session waits in the server's queue for an exclusive grant of it
// (AcquireQueued, which lock.Acquire uses), as the server's lock manager
// refuses a request that conflicts with a queued one; and for
// lock.IntentTTL after an exclusive TryAcquire or TryAcquireAll was refused
// because the key was held shared. So a reader is refused while a writer
// waits in the queue (one whose context or session ends leaves it at once)
// or holds the key, and for at most lock.IntentTTL after the last refused
// attempt of a writer that tries.
func (l *Lock) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	return l.acquireOne(ctx, key, ttl, shared)
}
