package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/lock"
)

// MaxReplicaAckTimeout is the longest WithReplicaAcks timeout: an ack that
// takes longer than this says that the replicas are not keeping up.
const MaxReplicaAckTimeout = rediscall.MaxAckTimeout

// WithReplicaAcks makes every write that a promise rests on — a grant and
// its fence counter, an extension — wait until n replicas have
// acknowledged it (WAIT n timeout, sent in the same round trip as the
// script, through a pipeline on the connection that ran it; on a Cluster,
// on the master of the key's slot), before the operation reports success.
// A grant whose write fewer than n replicas acknowledged within timeout is
// released again (where the release reaches the server) and the attempt
// fails with lock.ErrUnavailable: its outcome is unknown, and it is
// retried as any unavailable attempt is. An extension so left fails the
// same way. A grant that a release hands to a queued waiter is confirmed
// by an acknowledged extension of the waiter's own (which covers the
// handoff written before it) before AcquireQueued returns it. Releases are
// not acknowledged: a release that a failover loses leaves the grant to
// expire at its ttl, a delay for the next holder, never a second one.
// ValidUntil still counts from before the request. n is 1 to 16 and
// timeout 1 ms to MaxReplicaAckTimeout; the client must be a *redis.Client
// (a failover client from Sentinel is one) or a *redis.ClusterClient.
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
		a := rediscall.Acks{N: n, Timeout: timeout}
		if err := a.Check(); err != nil {
			return err
		}
		c.acks = a
		return nil
	}
}

// write runs a script's call (see rediscall.Script) that writes, under WithReplicaAcks waiting for its
// replication in the same round trip; acked matches
// rediscall.ErrNotReplicated when the script ran but its write was not
// acknowledged in time.
func (l *Lock) write(ctx context.Context, script *rediscall.Script, call []any) (cmd *redis.Cmd, acked error) {
	return l.bounds.WriteEval(ctx, l.client, l.acks, script, call)
}

// undo releases a grant whose write was not acknowledged, so that it does
// not block the key until its ttl on this primary; a failure leaves it to
// expire.
func (l *Lock) undo(ctx context.Context, h lock.Handle) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.acks.Timeout+time.Second)
	defer cancel()
	_ = h.Release(ctx)
}
