package redislock

import (
	"context"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var _ lock.SharedLock = (*Lock)(nil)

// TryAcquireShared implements lock.SharedLock in one round trip
// (acquire_shared.lua): a share of key for ttl, unless an exclusive grant
// holds key, a writer's refused attempt marked it within lock.IntentTTL,
// or a writer waits in its queue (AcquireQueued). Then it returns
// lock.ErrNotAcquired with the exclusive grant's remaining ttl, the
// mark's, or how long the first waiter's place is kept. The share's token
// comes from the key's fence counter, as an exclusive grant's: larger than
// every earlier grant's of the key. Its handle extends and releases this
// share alone; the last share's release hands the key to the first queued
// writer or announces the release, as Release of an exclusive grant does.
func (l *Lock) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	h := l.attempt(key, ttl, "")
	shares, attempts := l.shareKeys(h.keys)
	h.rare = &rareParts{shares: shares, attempts: attempts}
	call := acquireSharedScript.Start(make([]any, 0, 3+6+3), 6)
	for i := range h.keys {
		call = append(call, &h.keys[i])
	}
	call = append(call, &h.rare.shares, &h.rare.attempts, &h.tail, &h.ttl, fenceLifetimeArg)
	sent := time.Now()
	cmd, acked := l.write(ctx, acquireSharedScript, call)
	r, err := l.granted(ctx, []string{key}, ttl, sent, cmd)
	if err != nil {
		return nil, err
	}
	return l.finish(ctx, h, r, sent, acked)
}
