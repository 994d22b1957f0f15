package backendkit

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

var acquireWith = kit.AcquireWith.(func(context.Context, lock.Lock, []string, func(context.Context) (lock.Handle, error), []lock.Option) (lock.Handle, error))

// AcquireWith is the waiting loop behind lock.Acquire, for the packages
// built on lock (the semaphore waits on all its slots with it, leader
// election on its key). try makes one attempt over keys; AcquireWith
// subscribes to keys' releases when l is a lock.Waiter and retries try
// until it succeeds, fails with an error other than lock.ErrNotAcquired or
// lock.ErrUnavailable, or ctx ends. opts are lock.Acquire's: the backoff
// bounds (lock.WithBackoff) and the logger and telemetry (lock.WithCommon).
func AcquireWith(ctx context.Context, l lock.Lock, keys []string, try func(context.Context) (lock.Handle, error), opts ...lock.Option) (lock.Handle, error) {
	return acquireWith(ctx, l, keys, try, opts)
}

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx's cause in the second case. The packages above lock wait with it.
func Sleep(ctx context.Context, d time.Duration) error { return kit.Sleep(ctx, d) }

// ContextWithToken returns a copy of ctx that carries a fencing token, as
// lock.TokenFrom reads it. The packages above lock use it so that user
// code finds the token of the grant it runs under.
func ContextWithToken(ctx context.Context, token uint64) context.Context {
	return kit.WithToken(ctx, token)
}

// lateReleaseTimeout bounds the release of a grant that arrived dead: its
// reply was late, so the release may be too, and the server frees the
// grant at its ttl in any case.
const lateReleaseTimeout = time.Second

// Deliver is the last step of a network backend's acquire: it returns h
// and err as they are, unless h's validity has already ended (its reply
// came back later than its ttl: a slow or partitioned network, a stalled
// process). Such a grant is no grant: another owner may hold the key by
// now, so Deliver releases it (at most a second's wait) and returns
// lock.ErrUnavailable, which lock.Acquire retries. No backend hands out a
// Handle whose ValidUntil has passed.
func Deliver(h lock.Handle, err error) (lock.Handle, error) {
	if err != nil || time.Now().Before(h.ValidUntil()) {
		return h, err
	}
	late := time.Since(h.ValidUntil())
	ctx, cancel := context.WithTimeout(context.Background(), lateReleaseTimeout)
	defer cancel()
	_ = h.Release(ctx)
	return nil, fmt.Errorf("%w: the grant (token %d) was valid until %v before its reply arrived",
		lock.ErrUnavailable, h.Token(), late.Round(time.Millisecond))
}
