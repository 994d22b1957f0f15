package etcdlock

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Hints. A failed acquire's error carries the holder's remaining ttl, the
// longest lock.Acquire sleeps when no release is seen. etcd gives a
// lease's remaining ttl only in a request of its own (LeaseTimeToLive), a
// second round trip per failed attempt: under contention, with every
// waiter woken at each release, half the requests of the waiters. But a
// lease ends no sooner than its holder last knew (a renewal moves the end
// later; a revoke deletes the keys, which the release watch reports). So
// the grant's value carries the end of its lease as the holder knew it at
// the acquire (or at Extend's move to another lease), and the failed Txn
// reads it with the holder's grant: while it is a second or more away
// (etcd counts leases in whole seconds) it is the hint, without a second
// request. Past that (a holder that renews) the Lock asks the server once
// and keeps, per lease, the end the answer implies, also a lower bound,
// while it is a second or more away. An early end only wakes a waiter
// early: it asks again.

// holder is a grant read by a failed acquire: its lease and the lease's
// end as its value gives it (zero if unknown).
type holder struct {
	lease  int64
	end    time.Time
	intent string // the key's intent key, when the holder is a share
}

// maxHintLeases is the most holder leases remaining asks about: the hint
// only bounds a waiter's sleep when no release arrives (an expiry is a
// deletion, which the watch reports too), so a few leases are enough, and
// a TryAcquireAny over thousands of held keys makes no thousands of
// requests.
const maxHintLeases = 16

// maxHintEntries bounds the cache; when full it starts again empty.
const maxHintEntries = 4096

// hintCache holds, by lease, the earliest end of holders' leases.
type hintCache struct {
	mu   sync.Mutex
	ends map[int64]time.Time
}

// get returns the lease's cached end if it is at least a second away.
func (c *hintCache) get(id int64, now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end, ok := c.ends[id]
	if !ok {
		return 0, false
	}
	if d := end.Sub(now); d >= time.Second {
		return d, true
	}
	delete(c.ends, id)
	return 0, false
}

func (c *hintCache) put(id int64, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ends == nil || len(c.ends) >= maxHintEntries {
		c.ends = make(map[int64]time.Time)
	}
	c.ends[id] = end
}

// remaining is the shortest (longest: the longest) remaining lease ttl
// among the first maxHintLeases distinct holders (0 when unknown): from the grant's value
// or the cache, or from the server, one request per lease neither gives,
// in parallel when there are several.
func (l *Lock) remaining(ctx context.Context, holders []holder, longest bool) time.Duration {
	var (
		mu   sync.Mutex
		best time.Duration
		ask  []int64
	)
	keep := func(d time.Duration) {
		mu.Lock()
		if best == 0 || (d < best) != longest {
			best = d
		}
		mu.Unlock()
	}
	now := time.Now()
	seen := make(map[int64]bool, min(len(holders), maxHintLeases))
	for _, h := range holders {
		id := h.lease
		if seen[id] {
			continue
		}
		if len(seen) == maxHintLeases {
			break
		}
		seen[id] = true
		if d := h.end.Sub(now); d >= time.Second {
			keep(d)
		} else if d, ok := l.hints.get(id, now); ok {
			keep(d)
		} else {
			ask = append(ask, id)
		}
	}
	if len(ask) == 1 { // the usual case: no goroutine
		if d, ok := l.askRemaining(ctx, ask[0]); ok {
			keep(d)
		}
		return best
	}
	var wg sync.WaitGroup
	for _, id := range ask {
		wg.Go(func() {
			if d, ok := l.askRemaining(ctx, id); ok {
				keep(d)
			}
		})
	}
	wg.Wait()
	return best
}

// askRemaining asks the server for a lease's remaining ttl and caches the
// end it implies.
func (l *Lock) askRemaining(ctx context.Context, id int64) (time.Duration, bool) {
	sent := time.Now()
	r, err := l.client.TimeToLive(requireLeader(ctx), clientv3.LeaseID(id))
	if err != nil {
		return 0, false
	}
	if r.TTL > 0 {
		l.hints.put(id, sent.Add(time.Duration(r.TTL)*time.Second))
	}
	return leaseRemaining(r.TTL), true
}
