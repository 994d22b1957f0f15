package backendkit

import (
	"context"
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
