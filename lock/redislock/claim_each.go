package redislock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var (
	//go:embed claim_each.lua
	claimEachSrc    string
	claimEachScript = rediscall.NewScript(clockSrc + claimEachSrc)
)

var _ lock.EachClaimer = (*Lock)(nil)

// ClaimEach implements lock.EachClaimer: each request's key is claimed
// for its ttl as lock.Claim claims it here (a grant as TryAcquire makes
// it, with the same key layout and token, left to lapse), independently
// of the others. The claims go in scripts of at most 64 keys (on a
// Cluster, of one hash slot each), all in one pipeline: one round trip of
// wall time (one per master, sent together, on a Cluster); the server
// runs about 16 KB of it, some 80 claims, in each pass of its event loop
// (see the package doc). A key held, or claimed earlier in reqs, is
// refused with lock.ErrNotAcquired and its remaining ttl. Under
// WithReplicaAcks one WAIT follows each master's scripts, and the claims
// it did not acknowledge are released again and reported as
// lock.ErrUnavailable, as TryAcquire does. Each request is
// checked as lock.ClaimEach checks it (key and ttl within Limits).
func (l *Lock) ClaimEach(ctx context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	res := make([]lock.ClaimResult, len(reqs))
	valid := make([]int, 0, len(reqs)) // of reqs
	for i, r := range reqs {
		if err := backendkit.Validate(ctx, r.Key, r.TTL, limits); err != nil {
			res[i].Err = err
			continue
		}
		valid = append(valid, i)
	}
	if len(valid) == 0 {
		return res
	}
	// Each claim has an attempt id of its own, "<call's id>.<index>", so
	// that a retried script finds its own claims and no other.
	id := attemptID() + "."
	keys := make([]redisKeys, len(valid))
	tails := make([]string, len(valid))
	ttls := make([]int64, len(valid))
	for j, i := range valid {
		var buf [32]byte
		keys[j], tails[j] = l.keysOf(reqs[i].Key, strconv.AppendInt(append(buf[:0], id...), int64(i), 36))
		ttls[j] = ms(reqs[i].TTL)
	}
	order, ends := l.chunks(len(valid), claimChunk, func(j int) string { return keys[j][0] })
	calls := make([]scriptCall, len(ends))
	start := 0
	for c, end := range ends {
		n := end - start
		call := claimEachScript.Start(make([]any, 0, 3+2*n+2*n), 2*n)
		for _, j := range order[start:end] {
			call = append(call, &keys[j][0], &keys[j][1])
		}
		for _, j := range order[start:end] {
			call = append(call, &tails[j], &ttls[j])
		}
		calls[c] = scriptCall{Script: claimEachScript, Args: call}
		start = end
	}
	l.pipeline(ctx, calls, true)
	var undo []*handle // claims made but not acknowledged
	start = 0
	for c, end := range ends {
		part := order[start:end]
		claims, err := claimsOf(calls[c].Cmd, len(part))
		for k, j := range part {
			i := valid[j]
			r := &res[i]
			switch cl := claims[k]; {
			case err != nil:
				r.Err = backendkit.Unavailable("redislock: claim", err)
			case !cl.granted:
				r.Err = backendkit.NotAcquired(reqs[i].Key, backendkit.RemainingMillis(cl.left))
			case calls[c].Acked != nil:
				r.Err = backendkit.Unavailable("redislock: claim", calls[c].Acked)
				h := &handle{l: l, key: reqs[i].Key, keys: keys[j], tail: tails[j]}
				h.granted(cl.token, []byte(cl.since), time.Time{})
				undo = append(undo, h)
			default:
				r.Token = cl.token
			}
		}
		start = end
	}
	if len(undo) > 0 {
		l.undoClaims(ctx, undo)
	}
	return res
}

// claim is one entry of claim_each.lua's reply.
type claim struct {
	granted bool
	token   uint64
	since   string // µs, of a granted claim
	left    int64  // ms, of a refused one
}

// claimsOf reads claim_each.lua's reply to a chunk of n claims: {granted
// at µs, then per claim a token, "<token>|<granted at µs>" or a remaining
// ttl in ms}.
func claimsOf(cmd *redis.Cmd, n int) ([]claim, error) {
	out := make([]claim, n)
	res, err := cmd.Slice()
	if err != nil {
		return out, err
	}
	var since string
	if len(res) > 0 {
		since, _ = res[0].(string)
	}
	if len(res) != 1+n || since == "" {
		return out, fmt.Errorf("unexpected reply of %d entries for %d claims", len(res), n)
	}
	for k, r := range res[1:] {
		switch v := r.(type) {
		case int64:
			out[k] = claim{left: v}
		case string:
			digits, at, own := strings.Cut(v, "|")
			if !own {
				at = since
			}
			tok, err := strconv.ParseUint(digits, 10, 64)
			if err != nil {
				return out, fmt.Errorf("unexpected claim %q", v)
			}
			out[k] = claim{granted: true, token: tok, since: at}
		default:
			return out, fmt.Errorf("unexpected claim %v", r)
		}
	}
	return out, nil
}

// undoClaims releases claims whose writes were not acknowledged (see
// undo), in scripts of at most claimChunk keys (release_all.lua), all in
// one pipeline; a failure leaves them to expire.
func (l *Lock) undoClaims(ctx context.Context, hs []*handle) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.acks.Timeout+time.Second)
	defer cancel()
	order, ends := l.chunks(len(hs), claimChunk, func(i int) string { return hs[i].keys[0] })
	calls := l.releaseCalls(releaseAllScript, hs, order, ends)
	l.pipeline(ctx, calls, false)
}
