package redislock

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var (
	//go:embed release_each.lua
	releaseEachSrc    string
	releaseEachScript = rediscall.NewScript(clockSrc + handoffSrc + releaseKeySrc + releaseEachSrc)
)

// releaseChunk is the most grants one script of ReleaseEach releases: a
// release costs the server about 5 µs (GET, DEL, EXISTS of the queue,
// PUBLISH to the subscribed release channel), so a chunk runs for about
// 0.2 ms; its command (about 14 KB) is shorter than the 16 KB the server
// reads of a client's input in a pass of its event loop
// (BenchmarkScriptServerTime/release_each; docs/redis.md, "Scale").
var releaseChunk = 32

var _ lock.EachReleaser = (*Lock)(nil)

// ReleaseEach implements lock.EachReleaser: each handle of this Lock is
// released as its Release releases it (release.lua's logic, in
// release_each.lua: the key handed to the first live waiter of its queue,
// or its release announced to its subscribers), independently of the
// others, in scripts of at most 32 grants (on a Cluster, of one hash slot
// each), all in one pipeline: one round trip of wall time (one per
// master, sent together, on a Cluster). As Release, it is not
// acknowledged under WithReplicaAcks. A handle released before gets
// lock.ErrLost without a call; a share (TryAcquireShared), or a handle of
// another Lock, gets an error matching lock.ErrInvalidArgument and is
// left alone (lock.ReleaseEach then calls its Release). An error that
// stopped a pipeline (the server unreachable) is, wrapped in
// lock.ErrUnavailable, the outcome of each grant it left unanswered.
func (l *Lock) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	errs := make([]error, len(hs))
	if err := backendkit.CheckContext(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	mine := make([]*handle, 0, len(hs))
	at := make([]int, 0, len(hs)) // of hs
	for i, h := range hs {
		rh, ok := h.(*handle)
		if !ok || rh.l != l || rh.shared() {
			errs[i] = fmt.Errorf("%w: redislock: ReleaseEach of a share or of a handle of another Lock (%T)", lock.ErrInvalidArgument, h)
			continue
		}
		if rh.release() {
			errs[i] = rh.lost("second release")
			continue
		}
		mine = append(mine, rh)
		at = append(at, i)
	}
	if len(mine) == 0 {
		return errs
	}
	order, ends := l.chunks(len(mine), releaseChunk, func(j int) string { return mine[j].keys[0] })
	calls := l.releaseCalls(releaseEachScript, mine, order, ends)
	l.pipeline(ctx, calls, false)
	start := 0
	for c, end := range ends {
		part := order[start:end]
		outs, err := releasesOf(calls[c].Cmd, len(part))
		for k, j := range part {
			errs[at[j]] = mine[j].releasedIf(outs[k], err)
			l.metrics.Release(ctx, errs[at[j]])
		}
		start = end
	}
	return errs
}

// releaseCalls are the calls of script (release_each.lua or
// release_all.lua: the same keys and arguments) that release hs, a chunk
// of order each (see chunks).
func (l *Lock) releaseCalls(script *rediscall.Script, hs []*handle, order, ends []int) []scriptCall {
	calls := make([]scriptCall, len(ends))
	start := 0
	for c, end := range ends {
		n := end - start
		call := script.Start(make([]any, 0, 3+4*n+2+3*n), 4*n)
		for _, i := range order[start:end] {
			for k := range hs[i].keys {
				call = append(call, &hs[i].keys[k])
			}
		}
		call = append(call, l.channelArg, fenceLifetimeArg)
		for _, i := range order[start:end] {
			call = append(call, &hs[i].value, &hs[i].key, &hs[i].digits)
		}
		calls[c] = scriptCall{Script: script, Args: call}
		start = end
	}
	return calls
}

// releasesOf reads release_each.lua's reply to a chunk of n releases.
func releasesOf(cmd *redis.Cmd, n int) ([]int64, error) {
	out := make([]int64, n)
	res, err := cmd.Int64Slice()
	if err != nil {
		return out, err
	}
	if len(res) != n {
		return out, fmt.Errorf("unexpected reply of %d entries for %d releases", len(res), n)
	}
	return res, nil
}
