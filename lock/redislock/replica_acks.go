package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// MaxReplicaAckTimeout is the longest WithReplicaAcks timeout: an ack that
// takes longer than this says that the replicas are not keeping up.
const MaxReplicaAckTimeout = time.Minute

// WithReplicaAcks makes every write that a promise rests on — a grant and
// its fence counter, an extension, a release and the handoff it makes to a
// queued waiter, a forced release, a waiter leaving its queue — wait until
// n replicas have acknowledged it (WAIT n timeout, sent in the same round
// trip as the script, through a pipeline on the connection that ran it; on
// a Cluster, on the master of the key's slot), before the operation reports
// success. A grant whose write fewer than n replicas acknowledged within
// timeout is released again (where the release reaches the server) and the
// attempt fails with lock.ErrUnavailable: its outcome is unknown, and it is
// retried as any unavailable attempt is. An extension or a release so
// left fails the same way. A handoff that a queued waiter receives is
// confirmed by an extension of its own, acknowledged likewise, before
// AcquireQueued returns it. ValidUntil still counts from before the
// request. n is 1 to 16 and timeout 1 ms to MaxReplicaAckTimeout; the
// client must be a *redis.Client (a failover client from Sentinel is one)
// or a *redis.ClusterClient.
//
// What it guarantees: a failover promotes a replica that has every write an
// acknowledged operation made, if the replica promoted is one that
// acknowledged, or one at least as up to date. Sentinel and Redis Cluster
// promote the replica with the largest replication offset among those they
// can reach, so with one ack a grant survives the death of the primary
// unless the acknowledging replica is cut off at the same time; with n
// equal to the number of replicas, it survives whichever is promoted. What
// it costs: one WAIT per write, which returns as soon as n replicas have
// the write (on loopback a fraction of a round trip; see
// docs/benchmarks.md), and unavailability while fewer than n replicas
// answer. The server's min-replicas-to-write refuses writes when fewer
// replicas are connected at all: it makes the refusal immediate rather
// than a WAIT timeout, and keeps a primary cut off from its replicas (the
// minority side of a partition) from granting anything; it does not make a
// write wait for its ack, which this option does.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return func(c *config) error {
		if n < 1 || n > 16 {
			return fmt.Errorf("WithReplicaAcks: %d replicas is outside 1..16", n)
		}
		if timeout < time.Millisecond || timeout > MaxReplicaAckTimeout {
			return fmt.Errorf("WithReplicaAcks: timeout %v is outside 1ms..%v", timeout, MaxReplicaAckTimeout)
		}
		c.acks = replicaAcks{n, timeout}
		return nil
	}
}

// replicaAcks is WithReplicaAcks' setting: n 0 for none.
type replicaAcks struct {
	n       int
	timeout time.Duration
}

// checkAcksClient refuses WithReplicaAcks on a client whose writes cannot
// be followed by a WAIT on the same connection.
func checkAcksClient(client redis.UniversalClient, acks replicaAcks) error {
	if acks.n == 0 {
		return nil
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nil
	}
	return backendkit.Invalid("redislock", "WithReplicaAcks needs a *redis.Client or *redis.ClusterClient, not a %T", client)
}

// errNotReplicated: fewer replicas than WithReplicaAcks asks for
// acknowledged a write in time. The write was made on the primary: its
// outcome after a failover is unknown.
var errNotReplicated = errors.New("redislock: the write was not acknowledged by enough replicas in time")

// write runs a script that writes, then, under WithReplicaAcks, waits for
// its replication in the same round trip. cmd is the script's reply; acked
// is nil, or errNotReplicated (wrapped with what was acknowledged) when the
// script ran but its write was not acknowledged in time.
func (l *Lock) write(ctx context.Context, script *redis.Script, keys []string, args ...any) (cmd *redis.Cmd, acked error) {
	if l.acks.n == 0 {
		return l.run(ctx, script, keys, args...), nil
	}
	err := l.within(ctx, func() error {
		cmd, acked = l.writeAcked(ctx, script, keys, args...)
		return nil
	})
	if err != nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, nil
	}
	return cmd, acked
}

func (l *Lock) writeAcked(ctx context.Context, script *redis.Script, keys []string, args ...any) (*redis.Cmd, error) {
	var node *redis.Client
	switch c := l.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, keys[0]); err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd, nil
		}
	}
	for loaded := false; ; loaded = true {
		pipe := node.Pipeline()
		cmd := script.EvalSha(ctx, pipe, keys, args...)
		wait := pipe.Do(ctx, "WAIT", l.acks.n, l.acks.timeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		if err := cmd.Err(); err != nil && !loaded && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// Not run: load it and send both again.
			if err := script.Load(ctx, node).Err(); err != nil {
				cmd.SetErr(err)
				return cmd, nil
			}
			continue
		}
		if cmd.Err() != nil && cmd.Err() != redis.Nil {
			return cmd, nil
		}
		n, err := wait.Int64()
		switch {
		case err != nil:
			return cmd, fmt.Errorf("%w: WAIT: %w", errNotReplicated, err)
		case n < int64(l.acks.n):
			return cmd, fmt.Errorf("%w: %d of %d replicas within %v", errNotReplicated, n, l.acks.n, l.acks.timeout)
		}
		return cmd, nil
	}
}

// undo releases a grant whose write was not acknowledged, so that it does
// not block the key until its ttl on this primary; a failure leaves it to
// expire.
func (l *Lock) undo(ctx context.Context, h lock.Handle) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.acks.timeout+time.Second)
	defer cancel()
	_ = h.Release(ctx)
}
