package memlock

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var _ lock.AnyEachAcquirer = (*Lock)(nil)

// TryAcquireAnyEach implements lock.AnyEachAcquirer: every request, as
// TryAcquireAny makes it (from a random key on), in one pass under the
// Lock's mutex. A bad request fails alone.
func (l *Lock) TryAcquireAnyEach(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
	res := make([]lock.AnyResult, len(reqs))
	start := time.Now()
	l.mu.Lock()
	for i, r := range reqs {
		if res[i].Err = backendkit.ValidateKeys(ctx, r.Keys, r.TTL, lock.DefaultLimits); res[i].Err != nil {
			continue
		}
		if g, err := l.anyLocked(r.Keys, r.TTL, start); err != nil {
			res[i].Err = err
		} else {
			res[i].Handle = &handle{l: l, g: g}
		}
	}
	l.mu.Unlock()
	for _, r := range res {
		l.metrics.Attempt(ctx, start, r.Err)
	}
	return res
}

// anyLocked grants the first free key of keys from a random one on, or
// returns ErrNotAcquired with the shortest remaining ttl among them.
func (l *Lock) anyLocked(keys []string, ttl time.Duration, now time.Time) (*grant, error) {
	off := rand.N(len(keys))
	var shortest time.Duration
	for i := range keys {
		g, err := l.grantLocked(keys[(off+i)%len(keys)], ttl, now)
		if err == nil {
			return g, nil
		}
		if r := lock.RemainingTTL(err); shortest == 0 || r < shortest {
			shortest = r
		}
	}
	return nil, backendkit.NotAcquiredAny(keys, shortest)
}
