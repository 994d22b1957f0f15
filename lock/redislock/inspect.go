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
	res, err := l.run(ctx, inspectScript, []string{l.lockKey(key)}).Slice()
	if err != nil {
		return lock.Grant{}, false, backendkit.Unavailable("redislock: inspect", err)
	}
	if len(res) != 2 {
		return lock.Grant{}, false, nil
	}
	value, _ := res[0].(string)
	pttl, _ := res[1].(int64)
	g, ok := parseGrant(key, value, pttl)
	return g, ok, nil
}

// parseGrant reads a grant's value, "<token>|<granted at, µs>|<attempt>|<owner>".
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
	return lock.Grant{Key: key, Owner: parts[3], Token: token,
		Remaining: backendkit.RemainingMillis(pttl), Since: time.UnixMicro(since)}, true
}

// List implements lock.Inspector with SCAN (never KEYS), on every master of
// a Cluster, so it does not block the server; its cost grows with the
// number of keys under this Lock's prefix.
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
		keys, next, err := c.Scan(ctx, cursor, match, 1000).Result()
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
			for i := range rkeys {
				v, err := gets[i].Result()
				if err != nil {
					continue // released between SCAN and GET
				}
				if g, ok := parseGrant(names[i], v, ttls[i].Val().Milliseconds()); ok {
					out = append(out, g)
				}
			}
		}
		cursor = next
		if cursor == 0 {
			return out, nil
		}
	}
}
