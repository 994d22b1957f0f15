package redislock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
)

// renewChunk is the most keys one script of Batch.Renew works on, so that
// no call blocks Redis for long: a renewal costs the server about 1.3 µs a
// key, so a chunk runs for about 1.3 ms (docs/redis.md, "Scale").
const renewChunk = 1000

// claimChunk is the most claims one script of ClaimEach makes: a claim
// (two keys written) costs the server about 5.6 µs, so a chunk runs for
// about 0.4 ms. Redis reads a client's pipeline 16 KB at a time, once per
// pass of its event loop, and runs each script that read completed, whole:
// a chunk of 64 is about 12 KB, so a pass runs about 80 claims of a
// pipeline (0.45 ms), where one of 250 (48 KB) ran whole in the pass that
// completed it, about 1.5 ms, while the server's other clients waited
// (see the package doc). A variable for the tests.
var claimChunk = 64

// scriptCall is one script call of a pipeline (see pipeline).
type scriptCall struct {
	script *rediscall.Script
	call   []any // see rediscall.Script
	cmd    *redis.Cmd
	acked  error // under WithReplicaAcks, as write's
}

// firstKey is the first key of a call (see rediscall.Script), "" for none.
func firstKey(call []any) string {
	if n, _ := call[2].(int); n > 0 {
		switch k := call[3].(type) {
		case string:
			return k
		case *string:
			return *k
		}
	}
	return ""
}

// newCmd is the command of call, routed by its first key.
func newCmd(ctx context.Context, call []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, call...)
	if n, _ := call[2].(int); n > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// evalOf is call sent by EVAL with the script's source.
func (c *scriptCall) evalOf() []any {
	return append([]any{"eval", c.script.Source()}, c.call[2:]...)
}

func noScript(cmd *redis.Cmd) bool {
	return cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT")
}

// pipeline runs calls in one pipeline: one round trip of wall time (on a
// Cluster, one per master, sent together by go-redis). Each script goes by
// EVALSHA, and those the server did not have once more by EVAL, in a
// second pipeline. Under WithReplicaAcks the calls of each master are
// followed by one WAIT on the same connection, whose shortfall is each of
// its calls' acked, when write says so (releases are not acknowledged). It
// sets every call's cmd; when ctx ended first, each holds ctx's error.
func (l *Lock) pipeline(ctx context.Context, calls []scriptCall, write bool) {
	// The calls' replies are made aside: a client that ignores contexts
	// may still write them after ctx ended (see rediscall.Bounds).
	cmds := make([]*redis.Cmd, len(calls))
	acked := make([]error, len(calls))
	err := l.within(ctx, func() error {
		if l.acks.N == 0 || !write {
			l.send(ctx, l.client, calls, cmds, nil)
			return nil
		}
		l.sendAcked(ctx, calls, cmds, acked)
		return nil
	})
	for i := range calls {
		if err != nil {
			calls[i].cmd = redis.NewCmd(ctx)
			calls[i].cmd.SetErr(err)
			continue
		}
		calls[i].cmd, calls[i].acked = cmds[i], acked[i]
	}
}

// send runs calls on c (a client, or a node of a Cluster) in one pipeline,
// and those the server did not have again by EVAL in a second; their
// replies go to cmds. wait, when not nil, is a command sent after the calls
// of each pipeline: its replies are returned, the first pipeline's first,
// and second[i] tells whether call i went in the second.
func (l *Lock) send(ctx context.Context, c redis.Cmdable, calls []scriptCall, cmds []*redis.Cmd, second []bool, wait ...any) []*redis.Cmd {
	var waits []*redis.Cmd
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for eval := false; len(pending) > 0; eval = true {
		pipe := c.Pipeline()
		for _, i := range pending {
			call := calls[i].call
			if eval {
				call = calls[i].evalOf()
				if second != nil {
					second[i] = true
				}
			}
			cmds[i] = newCmd(ctx, call)
			_ = pipe.Process(ctx, cmds[i])
		}
		if wait != nil {
			w := redis.NewCmd(ctx, wait...)
			_ = pipe.Process(ctx, w)
			waits = append(waits, w)
		}
		_, _ = pipe.Exec(ctx)
		if eval {
			break
		}
		pending = slices.DeleteFunc(pending, func(i int) bool { return !noScript(cmds[i]) })
	}
	return waits
}

// sendAcked is send under WithReplicaAcks: the calls go to their master,
// each master's in a pipeline of their own followed by WAIT, the masters
// at once.
func (l *Lock) sendAcked(ctx context.Context, calls []scriptCall, cmds []*redis.Cmd, acked []error) {
	byNode := map[*redis.Client][]int{}
	for i := range calls {
		var node *redis.Client
		var err error
		switch c := l.client.(type) {
		case *redis.ClusterClient:
			node, err = c.MasterForKey(ctx, firstKey(calls[i].call))
		case *redis.Client:
			node = c
		default: // refused by New
			err = l.acks.CheckClient(l.client)
		}
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
			continue
		}
		byNode[node] = append(byNode[node], i)
	}
	var wg sync.WaitGroup
	for node, at := range byNode {
		wg.Go(func() {
			part := make([]scriptCall, len(at))
			for j, i := range at {
				part[j] = calls[i]
			}
			got := make([]*redis.Cmd, len(at))
			second := make([]bool, len(at))
			waits := l.send(ctx, node, part, got, second, "WAIT", l.acks.N, l.acks.Timeout.Milliseconds())
			for j, i := range at {
				cmds[i] = got[j]
				w := waits[0]
				if second[j] {
					w = waits[1]
				}
				acked[i] = l.replicated(ctx, got[j], w)
			}
		})
	}
	wg.Wait()
}

// replicated is what a write's WAIT (w) tells of cmd, a call sent before
// it on the same connection: nil, or an error matching
// rediscall.ErrNotReplicated. A call moved to another node (a Cluster
// failover) has the client reload the slots' map for the next call.
func (l *Lock) replicated(ctx context.Context, cmd, w *redis.Cmd) error {
	if err := cmd.Err(); err != nil {
		if cc, ok := l.client.(*redis.ClusterClient); ok && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK ")) {
			cc.ReloadState(ctx)
		}
		return nil // the call's own error says it
	}
	n, err := w.Int64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT: %w", rediscall.ErrNotReplicated, err)
	case n < int64(l.acks.N):
		return fmt.Errorf("%w: %d of %d replicas within %v", rediscall.ErrNotReplicated, n, l.acks.N, l.acks.Timeout)
	}
	return nil
}
