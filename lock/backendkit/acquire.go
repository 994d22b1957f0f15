package backendkit

import (
	"context"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

var acquireWith = kit.AcquireWith.(func(context.Context, *lock.Config, lock.Lock, []string, func(context.Context) (lock.Handle, error)) (lock.Handle, error))

// AcquireWith is the waiting loop behind lock.Acquire, for the packages
// built on lock (the semaphore waits on all its slots with it, leader
// election on its key). try makes one attempt over keys; AcquireWith
// subscribes to keys' releases when l is a lock.Waiter and retries try
// until it succeeds, fails with an error other than lock.ErrNotAcquired or
// lock.ErrUnavailable, or ctx ends. cfg gives the backoff bounds, the
// logger and the telemetry providers.
func AcquireWith(ctx context.Context, cfg *lock.Config, l lock.Lock, keys []string, try func(context.Context) (lock.Handle, error)) (lock.Handle, error) {
	return acquireWith(ctx, cfg, l, keys, try)
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
