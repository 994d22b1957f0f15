package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var _ lock.GroupLock = (*Lock)(nil)

// TryAcquireAll implements lock.GroupLock in one round trip
// (acquire_all.lua): every key of keys exclusively for ttl if none is
// held, by a grant or by shares, or none of them. Queued waiters are not
// looked at, as TryAcquire does not look at them. Each key's grant has its
// own token, from its own fence counter, and its value names the group (a
// random id, Inspect's lock.Grant.Group). A key held by shares is marked as
// wanted by a writer, as TryAcquire marks it (see TryAcquireShared). At
// most MaxGroupKeys keys (one script; more is invalid input); on Redis
// Cluster all keys must share a hash tag ({…}), otherwise
// lock.ErrInvalidKey.
func (l *Lock) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (lock.Group, error) {
	if err := backendkit.ValidateGroup(ctx, keys, ttl, limits); err != nil {
		return nil, err
	}
	g := &group{l: l, keys: keys, rkeys: make([]redisKeys, len(keys))}
	g.tail = "G" + attemptID() + "|" + l.owner
	lockKeys := make([]string, 0, 2*len(keys))
	for i, k := range keys {
		g.rkeys[i], _ = l.keysOf(k, nil)
		lockKeys = append(lockKeys, g.rkeys[i][0], g.rkeys[i][1])
	}
	sent := time.Now()
	cmd, acked := l.write(ctx, acquireAllScript, callOf(acquireAllScript, lockKeys, []any{g.tail, ms(ttl), fenceLifetimeArg}))
	if err := g.granted(ctx, ttl, sent, cmd); err != nil {
		l.metrics.Attempt(ctx, sent, err)
		return nil, err
	}
	if acked != nil {
		l.undo(ctx, groupHandle{g})
		err := backendkit.Unavailable("redislock: acquire all", acked)
		l.metrics.Attempt(ctx, sent, err)
		return nil, err
	}
	h, err := backendkit.Deliver(groupHandle{g}, nil)
	l.metrics.Attempt(ctx, sent, err)
	if err != nil {
		return nil, err
	}
	return h.(groupHandle).group, nil
}

// granted reads acquire_all.lua's reply into g: {1, granted at µs,
// remaining ms, token...} or {0, longest remaining ms, held key's index}.
func (g *group) granted(ctx context.Context, ttl time.Duration, sent time.Time, cmd *redis.Cmd) error {
	res, err := cmd.Slice()
	r := make([]int64, len(res))
	for i := range res {
		switch v := res[i].(type) {
		case int64:
			r[i] = v
		case string: // tokens and times: numbers beyond Lua's integers
			if r[i], err = strconv.ParseInt(v, 10, 64); err != nil {
				return backendkit.Unavailable("redislock: acquire all", fmt.Errorf("unexpected reply %v", res))
			}
		}
	}
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "CROSSSLOT"):
		return fmt.Errorf("%w: on Redis Cluster the keys of one TryAcquireAll must share a hash tag ({…}): %w", lock.ErrInvalidKey, err)
	case err != nil:
		return backendkit.Unavailable("redislock: acquire all", err)
	case len(r) == 3 && r[0] == 0 && r[2] >= 0 && int(r[2]) < len(g.keys):
		return backendkit.NotAcquired(g.keys[r[2]], backendkit.RemainingMillis(r[1]))
	case len(r) == 3+len(g.keys) && r[0] == 1:
		g.tokens = make([]uint64, len(g.keys))
		g.values = make([]string, len(g.keys))
		since := strconv.FormatInt(r[1], 10)
		for i := range g.keys {
			if r[3+i] <= 0 { // a retried command found a key gone since
				return backendkit.Unavailable("redislock: acquire all", fmt.Errorf("key %q of the group is gone", g.keys[i]))
			}
			g.tokens[i] = uint64(r[3+i])
			g.values[i] = strconv.FormatUint(g.tokens[i], 10) + "|" + since + "|" + g.tail
		}
		g.validUntil = backendkit.ValidUntil(sent, min(ttl, backendkit.RemainingMillis(r[2])))
		return nil
	}
	return backendkit.Unavailable("redislock: acquire all", fmt.Errorf("unexpected reply %v", res))
}

// group is the grant of every key of one TryAcquireAll.
type group struct {
	l      *Lock
	keys   []string
	rkeys  []redisKeys
	tail   string // of every key's value: "G<group id>|<owner>"
	tokens []uint64
	values []string // each key's value: "<token>|<granted at µs>|<tail>"

	lease
}

func (g *group) Keys() []string      { return g.keys }
func (g *group) Tokens() []uint64    { return g.tokens }
func (g *group) Limits() lock.Limits { return limits }

func (g *group) lost(what string, n int64) error {
	return fmt.Errorf("%w: %s of the group of %q: %d of its %d grants are gone", lock.ErrLost, what, g.keys, n, len(g.keys))
}

// Extend implements lock.Group in one round trip (extend_all.lua). Keys
// still held are renewed even when another is gone (then lock.ErrLost).
func (g *group) Extend(ctx context.Context, ttl time.Duration) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := limits.CheckTTL(ttl); err != nil {
		return err
	}
	if g.isReleased() {
		return g.lost("extend after release", int64(len(g.keys)))
	}
	keys := make([]string, len(g.keys))
	args := make([]any, 0, 1+len(g.keys))
	args = append(args, ms(ttl))
	for i := range g.keys {
		keys[i] = g.rkeys[i][0]
		args = append(args, g.values[i])
	}
	sent := time.Now()
	cmd, acked := g.l.write(ctx, extendAllScript, callOf(extendAllScript, keys, args))
	n, err := cmd.Int64()
	return g.extendedIf("redislock: extend all", sent, ttl, err, n != 0, acked, func() error { return g.lost("extend", n) })
}

// Release implements lock.Group in one round trip (release_all.lua),
// which hands each key on or announces its release, as Release of one
// grant does.
func (g *group) Release(ctx context.Context) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if g.release() {
		return g.lost("second release", int64(len(g.keys)))
	}
	keys := make([]string, 0, 4*len(g.keys))
	args := make([]any, 0, 2+3*len(g.keys))
	args = append(args, g.l.channel, fenceLifetimeArg)
	for i, k := range g.keys {
		keys = append(keys, g.rkeys[i][:]...)
		args = append(args, g.values[i], k, strconv.FormatUint(g.tokens[i], 10))
	}
	res, err := g.l.run(ctx, releaseAllScript, keys, args...).Int64Slice()
	switch {
	case err != nil:
		err = backendkit.Unavailable("redislock: release all", err)
	case len(res) != 2:
		err = backendkit.Unavailable("redislock: release all", fmt.Errorf("unexpected reply %v", res))
	case res[0] > 0:
		err = g.lost("release", res[0])
	case res[1] > 0 && !time.Now().Before(g.ValidUntil()):
		// Gone before its time with no grant since is a retried release
		// (see handle.Release); after it, an expiry.
		err = g.lost("release", res[1])
	}
	g.l.metrics.Release(ctx, err)
	return err
}

// groupHandle shows a group as a lock.Handle, for backendkit.Deliver and
// undo: its key is the keys joined, its token the first key's.
type groupHandle struct{ *group }

func (h groupHandle) Key() string   { return strings.Join(h.keys, ",") }
func (h groupHandle) Token() uint64 { return h.tokens[0] }
