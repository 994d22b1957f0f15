package redislock

import (
	"context"
	"errors"
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
// about 0.4 ms; its arguments (about 13 KB) are less than the 16 KB the
// server reads of a client's input in a pass of its event loop, so that
// a pass runs one or two of them (docs/redis.md, "Scale"). A variable for
// the tests.
var claimChunk = 64

// unpaced is the window of a batch operation whose scripts all go in one
// pipeline (see pipeline): Redis reads a client's input 16 KB per pass of
// its event loop and runs the commands it completes, so what a pipeline
// costs the server's other clients in a pass is the work of about 16 KB
// of it, whatever its length: about 0.45 ms of claims, one release chunk
// (0.2 ms) or one renewal chunk (1.3 ms). Only TryAcquireAnyEach's
// requests cost more per byte: see anyEachWindow.
const unpaced = 0

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

// pipeline runs calls in one pipeline when window is unpaced (on a
// Cluster, go-redis sends each master's part at once), otherwise in
// pipelines of at most window calls, each sent when the previous one to
// the same server came back: one after the other on a single server, each
// master's at once on a Cluster (routed by the calls' first keys). Each
// script goes by EVALSHA, and those the server did not have once more by
// EVAL, in a second pipeline. Under WithReplicaAcks each master's part of
// a pipeline of a write is followed by one WAIT on the same connection,
// whose shortfall is each of its calls' acked (releases are not
// acknowledged). It sets every call's cmd; when ctx ended first, each
// holds ctx's error. Of pipelines sent one after the other, one that
// failed for a reason other than a server's error reply (the server
// unreachable), or whose WAIT fell short, fails its server's calls not
// sent yet with its error.
func (l *Lock) pipeline(ctx context.Context, calls []scriptCall, write bool, window int) {
	// The calls' replies are made aside: a client that ignores contexts
	// may still write them after ctx ended (see rediscall.Bounds).
	cmds := make([]*redis.Cmd, len(calls))
	acked := make([]error, len(calls))
	err := l.within(ctx, func() error {
		if window <= unpaced || window >= len(calls) {
			// One pipeline (on a Cluster, go-redis sends each master's
			// part at once).
			if l.acks.N == 0 || !write {
				l.send(ctx, l.client, calls, cmds, nil)
			} else {
				l.sendAcked(ctx, calls, cmds, acked)
			}
			return nil
		}
		servers := l.byServer(ctx, calls, cmds)
		var wg sync.WaitGroup
		for i := 1; i < len(servers); i++ {
			wg.Go(func() { l.sendWaves(ctx, servers[i], calls, cmds, acked, write, window) })
		}
		if len(servers) > 0 {
			l.sendWaves(ctx, servers[0], calls, cmds, acked, write, window) // on this goroutine
		}
		wg.Wait()
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

// serverCalls are the calls of a pipeline that go to one server: their
// indexes, in order.
type serverCalls struct {
	addr string // "" on a client of one server
	at   []int
}

// byServer groups calls by the server they go to: on a Cluster, the
// master of their first key's slot (a call whose master is not known gets
// the error in cmds and goes nowhere); one group otherwise.
func (l *Lock) byServer(ctx context.Context, calls []scriptCall, cmds []*redis.Cmd) []serverCalls {
	cc, ok := l.client.(*redis.ClusterClient)
	if !ok {
		at := make([]int, len(calls))
		for i := range at {
			at[i] = i
		}
		return []serverCalls{{at: at}}
	}
	var out []serverCalls
	for i := range calls {
		node, err := cc.MasterForKey(ctx, firstKey(calls[i].call))
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
			continue
		}
		addr := node.Options().Addr
		g := slices.IndexFunc(out, func(s serverCalls) bool { return s.addr == addr })
		if g < 0 {
			g = len(out)
			out = append(out, serverCalls{addr: addr})
		}
		out[g].at = append(out[g].at, i)
	}
	return out
}

// sendWaves sends sv's calls in pipelines of at most window calls, each
// when the previous one came back.
func (l *Lock) sendWaves(ctx context.Context, sv serverCalls, calls []scriptCall, cmds []*redis.Cmd, acked []error, write bool, window int) {
	fail := func(at []int, err error) {
		for _, i := range at {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
		}
	}
	for start := 0; start < len(sv.at); start += window {
		wave := sv.at[start:min(start+window, len(sv.at))]
		part := make([]scriptCall, len(wave))
		for j, i := range wave {
			// Not the whole call: its cmd is the caller's to set, who may
			// have returned at ctx's end (see rediscall.Bounds).
			part[j] = scriptCall{script: calls[i].script, call: calls[i].call}
		}
		got := make([]*redis.Cmd, len(wave))
		ack := make([]error, len(wave))
		if l.acks.N == 0 || !write {
			l.send(ctx, l.client, part, got, nil)
		} else {
			l.sendAcked(ctx, part, got, ack)
		}
		for j, i := range wave {
			cmds[i], acked[i] = got[j], ack[j]
		}
		if err := stopped(ctx, got, ack); err != nil {
			fail(sv.at[start+len(wave):], err)
			return
		}
	}
}

// stopped is why the calls after a pipeline whose replies are cmds (and
// acknowledgements acked) are not to be sent: ctx's error once it ended,
// an error of the pipeline that is not a server's reply (the connection
// failed), or a WAIT that fell short (the replicas do not keep up: each
// later write would wait for the timeout in its turn); nil otherwise.
func stopped(ctx context.Context, cmds []*redis.Cmd, acked []error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, cmd := range cmds {
		var reply redis.Error
		if err := cmd.Err(); err != nil && !errors.As(err, &reply) {
			return err
		}
		if acked[i] != nil {
			return acked[i]
		}
	}
	return nil
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
