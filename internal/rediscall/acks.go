package rediscall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxAckTimeout is the longest timeout of Acks.
const MaxAckTimeout = time.Minute

// Acks is how many replicas must acknowledge a write, and how long to wait
// for them (WAIT N Timeout): N 0 for none.
type Acks struct {
	N       int
	Timeout time.Duration
}

// Check returns an error when a is not 1..16 replicas within 1 ms to
// MaxAckTimeout.
func (a Acks) Check() error {
	if a.N < 1 || a.N > 16 {
		return fmt.Errorf("WithReplicaAcks: %d replicas is outside 1..16", a.N)
	}
	if a.Timeout < time.Millisecond || a.Timeout > MaxAckTimeout {
		return fmt.Errorf("WithReplicaAcks: timeout %v is outside 1ms..%v", a.Timeout, MaxAckTimeout)
	}
	return nil
}

// CheckClient returns an error when a asks for acks and client's writes
// cannot be followed by a WAIT on the same connection.
func (a Acks) CheckClient(client redis.UniversalClient) error {
	if a.N == 0 {
		return nil
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nil
	}
	return fmt.Errorf("WithReplicaAcks needs a *redis.Client or *redis.ClusterClient, not a %T", client)
}

// ErrNotReplicated: fewer replicas than asked acknowledged a write in time.
// The write was made on the primary; its outcome after a failover is
// unknown.
var ErrNotReplicated = errors.New("the write was not acknowledged by enough replicas in time")

// Write runs a script that writes on client within ctx (see Within) and,
// when a asks for acks, waits for its replication in the same round trip:
// EVALSHA and WAIT in one pipeline on the connection that runs the script
// (on a Cluster, the master of keys[0]'s slot). cmd is the script's reply;
// acked is nil, or matches ErrNotReplicated when the script ran but its
// write was not acknowledged in time.
func (b Bounds) Write(ctx context.Context, client redis.UniversalClient, a Acks, script *redis.Script, keys []string, args ...any) (cmd *redis.Cmd, acked error) {
	if a.N == 0 {
		return b.Run(ctx, client, script, keys, args...), nil
	}
	return b.acked(ctx, client, a, keys[0],
		func(p redis.Pipeliner) *redis.Cmd { return script.EvalSha(ctx, p, keys, args...) },
		func(node *redis.Client) error { return script.Load(ctx, node).Err() })
}

// acked sends a write (send, on a pipeline) and its WAIT within ctx, on the
// connection that runs it (on a Cluster, the master of key's slot); load
// loads the script on the node when it answered NOSCRIPT.
func (b Bounds) acked(ctx context.Context, client redis.UniversalClient, a Acks, key string, send func(redis.Pipeliner) *redis.Cmd, load func(*redis.Client) error) (cmd *redis.Cmd, acked error) {
	err := b.Within(ctx, func() error {
		cmd, acked = a.write(ctx, client, key, send, load)
		return nil
	})
	if err != nil {
		return failed(ctx, err), nil
	}
	return cmd, acked
}

func (a Acks) write(ctx context.Context, client redis.UniversalClient, key string, send func(redis.Pipeliner) *redis.Cmd, load func(*redis.Client) error) (*redis.Cmd, error) {
	var node *redis.Client
	switch c := client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, key); err != nil {
			return failed(ctx, err), nil
		}
	default:
		return failed(ctx, a.CheckClient(client)), nil
	}
	for loaded := false; ; loaded = true {
		pipe := node.Pipeline()
		cmd := send(pipe)
		wait := pipe.Do(ctx, "WAIT", a.N, a.Timeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if err := cmd.Err(); err != nil && !loaded && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// Not run: load it and send both again.
			if err := load(node); err != nil {
				cmd.SetErr(err)
				return cmd, nil
			}
			continue
		}
		if err := cmd.Err(); err != nil && err != redis.Nil {
			if c, ok := client.(*redis.ClusterClient); ok && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK ")) {
				// The slot has moved (a failover). The cluster client learns
				// it from the replies to the commands it routes, not from
				// this node's: have it reload its map for the next attempt
				// (chaos.TestFailoverCluster).
				c.ReloadState(ctx)
			}
			return cmd, nil
		}
		n, err := wait.Int64()
		switch {
		case err != nil:
			return cmd, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		case n < int64(a.N):
			return cmd, fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, a.N, a.Timeout)
		}
		return cmd, nil
	}
}
