package redislock

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Inspect implements lock.Inspector in one round trip.
func (l *Lock) Inspect(ctx context.Context, key string) (lock.Grant, bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return lock.Grant{}, false, err
	}
	keys, _ := l.keysOf(key, nil)
	shares, _ := l.shareKeys(keys)
	res, err := l.run(ctx, inspectScript, []string{keys[0], shares}).Slice()
	if err != nil {
		return lock.Grant{}, false, backendkit.Unavailable("redislock: inspect", err)
	}
	if len(res) != 2 && len(res) != 3 {
		return lock.Grant{}, false, nil
	}
	value, _ := res[0].(string)
	pttl, _ := res[1].(int64)
	g, ok := parseGrant(key, value, pttl)
	g.Shared = len(res) == 3
	return g, ok, nil
}

// parseGrant reads a grant's value (a share's too),
// "<token>|<granted at, µs>|<attempt>|<owner>"; the attempt of a group's
// grant is "G<group id>".
func parseGrant(key, value string, pttl int64) (lock.Grant, bool) {
	parts := strings.SplitN(value, "|", 4)
	if len(parts) != 4 || pttl < 0 {
		return lock.Grant{}, false
	}
	token, err1 := strconv.ParseUint(parts[0], 10, 64)
	since, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return lock.Grant{}, false
	}
	g := lock.Grant{Key: key, Owner: parts[3], Token: token,
		Remaining: backendkit.RemainingMillis(pttl), Since: time.UnixMicro(since)}
	if id, ok := strings.CutPrefix(parts[2], "G"); ok {
		g.Group = id
	}
	return g, true
}

// scanCount is the COUNT of List's SCAN calls: the slots of the keyspace
// each call walks. Over 50,000 keys a call of 1,000 cost the server 0.25
// ms (about 1 ms under the load of BenchmarkTimersAtScale, where every
// scheduler's size check lists its semaphores every 30 s), one of 200
// 0.055 ms, for 9% more server time in all.
const scanCount = 200

// List implements lock.Inspector with SCAN (never KEYS), on every master of
// a Cluster, scanCount slots of the keyspace a call, so it does not block
// the server; its cost grows with the number of keys under this Lock's
// prefix (every key of the Lock, not only the grants under prefix).
func (l *Lock) List(ctx context.Context, prefix string) ([]lock.Grant, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	var (
		out []lock.Grant
		mu  sync.Mutex
	)
	add := func(ctx context.Context, c redis.Cmdable) error {
		gs, err := l.scan(ctx, c, prefix)
		mu.Lock()
		out = append(out, gs...)
		mu.Unlock()
		return err
	}
	err := l.within(ctx, func() error {
		if cc, ok := l.client.(*redis.ClusterClient); ok {
			return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return add(ctx, c) })
		}
		return add(ctx, l.client)
	})
	if err != nil {
		return nil, backendkit.Unavailable("redislock: list", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (l *Lock) scan(ctx context.Context, c redis.Cmdable, prefix string) ([]lock.Grant, error) {
	var out []lock.Grant
	match := globEscape(l.prefix+"l") + "*"
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return nil, err
		}
		var names []string
		var rkeys []string
		for _, rk := range keys {
			if k, ok := decodeKey(strings.TrimPrefix(rk, l.prefix+"l")); ok && strings.HasPrefix(k, prefix) {
				names = append(names, k)
				rkeys = append(rkeys, rk)
			}
		}
		if len(rkeys) > 0 {
			pipe := c.Pipeline()
			gets := make([]*redis.StringCmd, len(rkeys))
			ttls := make([]*redis.DurationCmd, len(rkeys))
			for i, rk := range rkeys {
				gets[i] = pipe.Get(ctx, rk)
				ttls[i] = pipe.PTTL(ctx, rk)
			}
			if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
				return nil, fmt.Errorf("reading grants: %w", err)
			}
			var shared []int // of rkeys: the keys held by shares
			for i := range rkeys {
				v, err := gets[i].Result()
				if err != nil {
					continue // released between SCAN and GET
				}
				if strings.HasPrefix(v, "S|") {
					shared = append(shared, i)
				} else if g, ok := parseGrant(names[i], v, ttls[i].Val().Milliseconds()); ok {
					out = append(out, g)
				}
			}
			gs, err := l.scanShares(ctx, c, names, rkeys, shared)
			if err != nil {
				return nil, err
			}
			out = append(out, gs...)
		}
		cursor = next
		if cursor == 0 {
			return out, nil
		}
	}
}

// sharesPage is the most shares one read of List takes from a key's set,
// so that no call reads an unbounded set; a key with more is read in
// pages, a round trip each.
const sharesPage = 1000

// scanShares reads the live shares of the keys at shared (indexes of names
// and of their lock keys rkeys), one Grant each: in one round trip, and
// one more per further page of sharesPage shares of a key.
func (l *Lock) scanShares(ctx context.Context, c redis.Cmdable, names, rkeys []string, shared []int) ([]lock.Grant, error) {
	var out []lock.Grant
	for from := int64(0); len(shared) > 0; from += sharesPage {
		pipe := c.Pipeline()
		now := pipe.Time(ctx)
		sets := make([]*redis.ZSliceCmd, len(shared))
		for i, k := range shared {
			sets[i] = pipe.ZRangeWithScores(ctx, l.prefix+"s"+strings.TrimPrefix(rkeys[k], l.prefix+"l"), from, from+sharesPage-1)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, fmt.Errorf("reading shares: %w", err)
		}
		nowMs := now.Val().UnixMilli()
		more := shared[:0]
		for i, k := range shared {
			for _, z := range sets[i].Val() {
				v, _ := z.Member.(string)
				left := int64(z.Score) - nowMs
				if left <= 0 {
					continue // expired, not yet pruned
				}
				if g, ok := parseGrant(names[k], v, left); ok {
					g.Shared = true
					out = append(out, g)
				}
			}
			if len(sets[i].Val()) == sharesPage {
				more = append(more, k)
			}
		}
		shared = more
	}
	return out, nil
}
