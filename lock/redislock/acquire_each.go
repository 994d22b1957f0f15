package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var (
	//go:embed any_of.lua
	anyOfSrc string
	//go:embed acquire_each.lua
	acquireEachSrc    string
	acquireEachScript = rediscall.NewScript(clockSrc + anyOfSrc + acquireEachSrc)
)

var _ lock.AnyEachAcquirer = (*Lock)(nil)

// anyEachKeys and anyEachRequests bound one script of TryAcquireAnyEach,
// so that no call blocks Redis for long: at most 128 keys of its requests'
// and at most 32 requests. A request that takes a key costs the server
// about 15 µs (measured on a loaded machine, where a claim of ClaimEach
// costs 5.8 µs), one that finds its keys held about 2 µs per key, so a
// full chunk runs for about 0.5 ms (BenchmarkScriptServerTime).
// Variables for the tests of chunk boundaries.
var (
	anyEachKeys     = 128
	anyEachRequests = 32
)

// TryAcquireAnyEach implements lock.AnyEachAcquirer: each request is made
// as TryAcquireAny makes it (a grant of the first free key from a random
// one on, an ordinary handle), independently of the others and in order (a
// key granted to one request is held for the later ones). The requests go
// in scripts of at most 32 requests and 128 keys of theirs (a request of
// more keys, up to 512, in a script of its own; on a Cluster, of one hash
// slot each), all in one
// pipeline: one round trip of wall time (one per master, sent together, on
// a Cluster). A request of more than 512 keys is made by TryAcquireAny, in
// round trips of its own. Under WithReplicaAcks one WAIT follows each
// master's scripts, and a grant it did not acknowledge is released again
// and reported as lock.ErrUnavailable, as TryAcquire does. Each request is
// checked on its own (as TryAcquireAny checks its input; on a Cluster its
// keys must share a hash slot): a bad request fails alone.
func (l *Lock) TryAcquireAnyEach(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
	res := make([]lock.AnyResult, len(reqs))
	id := attemptID() + "."
	var items []anyItem
	var alone []int // of reqs: more than scriptKeys keys
	for i, r := range reqs {
		if res[i].Err = backendkit.ValidateKeys(ctx, r.Keys, r.TTL, limits); res[i].Err != nil {
			continue
		}
		if len(r.Keys) > scriptKeys {
			alone = append(alone, i)
			continue
		}
		it := anyItem{req: i, keys: make([]redisKeys, len(r.Keys)), ttl: ms(r.TTL), n: len(r.Keys), off: rand.N(len(r.Keys))}
		for k, key := range r.Keys {
			it.keys[k], _ = l.keysOf(key, nil)
		}
		if !l.oneSlot(it.keys) {
			res[i].Err = fmt.Errorf("%w: on Redis Cluster the keys of one TryAcquireAny must share a hash tag ({…})", lock.ErrInvalidKey)
			continue
		}
		it.tail = id + strconv.FormatInt(int64(i), 36) + "|" + l.owner
		items = append(items, it)
	}
	if len(items) > 0 {
		l.anyEach(ctx, reqs, items, res)
	}
	for _, i := range alone {
		res[i].Handle, res[i].Err = l.TryAcquireAny(ctx, reqs[i].Keys, reqs[i].TTL)
	}
	return res
}

// anyItem is one request of TryAcquireAnyEach on its way to a script.
type anyItem struct {
	req  int // its index in reqs
	keys []redisKeys
	tail string // of its grant's value: "<attempt>|<owner>"
	ttl  int64  // ms
	n    int    // len(keys), an argument of the script
	off  int    // the start offset
}

// anyEach makes items, in scripts of anyEachKeys keys (of one slot each)
// in one pipeline, and writes their outcomes to res.
func (l *Lock) anyEach(ctx context.Context, reqs []lock.AnyRequest, items []anyItem, res []lock.AnyResult) {
	order, ends := l.anyChunks(items)
	calls := make([]scriptCall, len(ends))
	start := 0
	for c, end := range ends {
		var nkeys int
		for _, j := range order[start:end] {
			nkeys += 2 * items[j].n
		}
		call := acquireEachScript.Start(make([]any, 0, 3+nkeys+1+4*(end-start)), nkeys)
		for _, j := range order[start:end] {
			for k := range items[j].keys {
				call = append(call, &items[j].keys[k][0], &items[j].keys[k][1])
			}
		}
		call = append(call, fenceLifetimeArg)
		for _, j := range order[start:end] {
			call = append(call, items[j].n, &items[j].tail, items[j].ttl, items[j].off)
		}
		calls[c] = scriptCall{Script: acquireEachScript, Args: call}
		start = end
	}
	sent := time.Now()
	l.pipeline(ctx, calls, true)
	var undo []*handle // grants made but not acknowledged
	start = 0
	for c, end := range ends {
		replies, err := anyReplies(calls[c].Cmd, end-start)
		for k, j := range order[start:end] {
			it := &items[j]
			i := it.req
			r, rerr := replies[k], err
			switch {
			case rerr == nil && r.granted && r.index >= len(it.keys):
				rerr = backendkit.Unavailable("redislock: acquire", fmt.Errorf("%w: key %d of %d", errAnyReply, r.index, len(it.keys)))
			case rerr != nil:
				rerr = backendkit.Unavailable("redislock: acquire", rerr)
			case !r.granted:
				rerr = backendkit.NotAcquiredAny(reqs[i].Keys, backendkit.RemainingMillis(r.left))
			default:
				h := &handle{l: l, key: reqs[i].Keys[r.index], keys: it.keys[r.index], tail: it.tail}
				var since [20]byte
				h.granted(r.token, strconv.AppendInt(since[:0], r.since, 10), backendkit.ValidUntil(sent, min(time.Duration(it.ttl)*time.Millisecond, backendkit.RemainingMillis(r.left))))
				if calls[c].Acked != nil {
					rerr = backendkit.Unavailable("redislock: acquire", calls[c].Acked)
					undo = append(undo, h)
					break
				}
				res[i].Handle, rerr = backendkit.Deliver(h, nil)
			}
			res[i].Err = rerr
			l.metrics.Attempt(ctx, sent, rerr)
		}
		start = end
	}
	if len(undo) > 0 {
		l.undoClaims(ctx, undo)
	}
}

// anyChunks orders items into the scripts of a pipeline, as chunks does:
// a chunk holds at most anyEachRequests items of one hash slot (on a
// Cluster) whose keys number at most anyEachKeys, or one item of more.
func (l *Lock) anyChunks(items []anyItem) (order, ends []int) {
	order, slots := l.chunks(len(items), len(items)+1, func(j int) string { return items[j].keys[0][0] })
	keys, slot := 0, 0
	for p, j := range order {
		if p > 0 && (p == slots[slot] || keys+items[j].n > anyEachKeys || p-lastOf(ends) == anyEachRequests) {
			ends = append(ends, p)
			keys = 0
			if p == slots[slot] {
				slot++
			}
		}
		keys += items[j].n
	}
	return order, append(ends, len(order))
}

// oneSlot reports whether keys may go in one script: on a Cluster, of one
// hash slot; on a Ring, of one hash tag.
func (l *Lock) oneSlot(keys []redisKeys) bool {
	for _, k := range keys[1:] {
		switch l.client.(type) {
		case *redis.ClusterClient:
			if keySlot(k[0]) != keySlot(keys[0][0]) {
				return false
			}
		case *redis.Ring:
			if hashTag(k[0]) != hashTag(keys[0][0]) {
				return false
			}
		}
	}
	return true
}

// anyReply is one entry of acquire_each.lua's reply (anyOf's).
type anyReply struct {
	granted bool
	token   uint64
	index   int
	since   int64 // µs, of a grant
	left    int64 // ms: of the grant's ttl, or the shortest of a refusal
}

var errAnyReply = errors.New("unexpected reply")

// anyReplies reads acquire_each.lua's reply to n requests: per request
// {1, token, index, granted at µs, remaining ttl ms} or {0, shortest
// remaining ttl ms}.
func anyReplies(cmd *redis.Cmd, n int) ([]anyReply, error) {
	out := make([]anyReply, n)
	res, err := cmd.Slice()
	if err != nil {
		return out, err
	}
	if len(res) != n {
		return out, fmt.Errorf("%w of %d entries for %d requests", errAnyReply, len(res), n)
	}
	for k, e := range res {
		f, _ := e.([]any)
		var v [5]int64
		for x := range min(len(f), len(v)) {
			switch y := f[x].(type) {
			case int64:
				v[x] = y
			case string: // the token and time: numbers beyond Lua's integers
				v[x], err = strconv.ParseInt(y, 10, 64)
			default:
				err = errAnyReply
			}
		}
		switch {
		case err == nil && len(f) == 2 && v[0] == 0:
			out[k] = anyReply{left: v[1]}
		case err == nil && len(f) == 5 && v[0] == 1 && v[2] >= 0 && v[2] < scriptKeys:
			out[k] = anyReply{granted: true, token: uint64(v[1]), index: int(v[2]), since: v[3], left: v[4]}
		default:
			return out, fmt.Errorf("%w %v", errAnyReply, e)
		}
	}
	return out, nil
}
