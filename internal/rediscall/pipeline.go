package rediscall

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Call is one script call of a pipeline (see Bounds.Pipeline).
type Call struct {
	Script *Script
	Args   []any      // the call, built as for Eval (see Script)
	Cmd    *redis.Cmd // its reply, set by Pipeline
	Acked  error      // under acks, as Write's acked, set by Pipeline
}

// firstKey is the first key of a call (see Script), "" for none.
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

// evalOf is c sent by EVAL with the script's source.
func (c *Call) evalOf() []any {
	return append([]any{"eval", c.Script.Source()}, c.Args[2:]...)
}

func noScript(cmd *redis.Cmd) bool {
	return cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT")
}

// Pipeline runs calls on client in one pipeline: one round trip of wall
// time (on a Cluster, one per master, sent together by go-redis). Each
// script goes by EVALSHA, and those the server did not have once more by
// EVAL, in a second pipeline. When write is true and a asks for acks, the
// calls of each master are followed by one WAIT on the same connection,
// whose shortfall is each of its calls' Acked. It sets every call's Cmd;
// when ctx ended first (see Within), each holds ctx's error.
//
// Redis reads a client's pipeline 16 KB at a time, once per pass of its
// event loop, and runs each call that read completed: the server's other
// clients wait for the calls of one read, not of the pipeline, so a
// caller bounds what one call does, not how many it sends.
func (b Bounds) Pipeline(ctx context.Context, client redis.UniversalClient, a Acks, calls []Call, write bool) {
	if len(calls) == 0 {
		return
	}
	// The calls' replies are made aside: a client that ignores contexts
	// may still write them after ctx ended (see Within).
	cmds := make([]*redis.Cmd, len(calls))
	acked := make([]error, len(calls))
	err := b.Within(ctx, func() error {
		if a.N == 0 || !write {
			send(ctx, client, calls, cmds, nil)
			return nil
		}
		a.sendAcked(ctx, client, calls, cmds, acked)
		return nil
	})
	for i := range calls {
		if err != nil {
			calls[i].Cmd = failed(ctx, err)
			continue
		}
		calls[i].Cmd, calls[i].Acked = cmds[i], acked[i]
	}
}

// send runs calls on c (a client, or a node of a Cluster) in one pipeline,
// and those the server did not have again by EVAL in a second; their
// replies go to cmds. wait, when not nil, is a command sent after the calls
// of each pipeline: its replies are returned, the first pipeline's first,
// and second[i] tells whether call i went in the second.
func send(ctx context.Context, c redis.Cmdable, calls []Call, cmds []*redis.Cmd, second []bool, wait ...any) []*redis.Cmd {
	var waits []*redis.Cmd
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for eval := false; len(pending) > 0; eval = true {
		pipe := c.Pipeline()
		for _, i := range pending {
			call := calls[i].Args
			if eval {
				call = calls[i].evalOf()
				if second != nil {
					second[i] = true
				}
			}
			cmds[i] = command(ctx, call)
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

// sendAcked is send under acks: the calls go to their master, each
// master's in a pipeline of their own followed by WAIT, the masters at
// once.
func (a Acks) sendAcked(ctx context.Context, client redis.UniversalClient, calls []Call, cmds []*redis.Cmd, acked []error) {
	byNode := map[*redis.Client][]int{}
	for i := range calls {
		var node *redis.Client
		var err error
		switch c := client.(type) {
		case *redis.ClusterClient:
			node, err = c.MasterForKey(ctx, firstKey(calls[i].Args))
		case *redis.Client:
			node = c
		default: // refused by the callers' constructors
			err = a.CheckClient(client)
		}
		if err != nil {
			cmds[i] = failed(ctx, err)
			continue
		}
		byNode[node] = append(byNode[node], i)
	}
	var wg sync.WaitGroup
	for node, at := range byNode {
		wg.Go(func() {
			part := make([]Call, len(at))
			for j, i := range at {
				// Not the whole Call: Pipeline writes its reply fields
				// once ctx ends, while this may still run (see Within).
				part[j] = Call{Script: calls[i].Script, Args: calls[i].Args}
			}
			got := make([]*redis.Cmd, len(at))
			second := make([]bool, len(at))
			waits := send(ctx, node, part, got, second, "WAIT", a.N, a.Timeout.Milliseconds())
			for j, i := range at {
				cmds[i] = got[j]
				w := waits[0]
				if second[j] {
					w = waits[1]
				}
				acked[i] = a.replicated(ctx, client, got[j], w)
			}
		})
	}
	wg.Wait()
}

// replicated is what a write's WAIT (w) tells of cmd, a call sent before
// it on the same connection: nil, or an error matching ErrNotReplicated. A
// call moved to another node (a Cluster failover) has the client reload
// the slots' map for the next call.
func (a Acks) replicated(ctx context.Context, client redis.UniversalClient, cmd, w *redis.Cmd) error {
	if err := cmd.Err(); err != nil {
		if cc, ok := client.(*redis.ClusterClient); ok && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK ")) {
			cc.ReloadState(ctx)
		}
		return nil // the call's own error says it
	}
	n, err := w.Int64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	case n < int64(a.N):
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, a.N, a.Timeout)
	}
	return nil
}
