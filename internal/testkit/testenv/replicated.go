package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Replicated topologies: a Redis primary with replicas and Sentinels, a
// Redis Cluster whose masters have replicas, a PostgreSQL primary with a
// synchronous standby. Each is started by its constructor's options and
// failed over by [Server.Failover], which returns once clients can reach
// the new primary and the old one serves again as its replica (or
// standby), so that the next failover is as safe as the first.
//
//	NewRedis(t, Replicas(2), Sentinels(3))   // primary, 2 replicas, 3 Sentinels
//	NewRedis(t, Members(3), Replicas(1))     // Cluster: 3 masters, 1 replica each
//	NewPostgres(t, Replicas(1))              // primary and a synchronous standby
//
// The etcd cluster of NewEtcd(t, Members(3)) is replicated by Raft; its
// faults are StopMember and StartMember.

// failoverTimeout bounds one Failover, from the fault until the topology is
// whole again.
const failoverTimeout = 90 * time.Second

// Replicas makes NewRedis start n replicas of each primary (with
// [Sentinels], or with [Members] for a Redis Cluster), and NewPostgres a
// synchronous streaming standby (n must be 1).
func Replicas(n int) Option { return func(c *config) { c.replicas = n } }

// Sentinels makes NewRedis start n Sentinels (redis-server --sentinel)
// that watch the primary under the name [SentinelMaster] and fail it over
// to one of its [Replicas] when a majority of them sees it down for a
// second.
func Sentinels(n int) Option { return func(c *config) { c.sentinels = n } }

func (c config) checkReplication(k *kind) error {
	switch {
	case c.replicas < 0 || c.sentinels < 0:
		return fmt.Errorf("Replicas(%d), Sentinels(%d): negative", c.replicas, c.sentinels)
	case c.replicas == 0 && c.sentinels == 0:
		return nil
	case k == etcdKind:
		return errors.New("etcd is replicated by Members; it takes no Replicas or Sentinels")
	case k == postgresKind && (c.sentinels > 0 || c.replicas != 1):
		return errors.New("NewPostgres takes Replicas(1), one synchronous standby, and no Sentinels")
	case k == redisKind && c.sentinels > 0 && c.members > 1:
		return errors.New("a Redis Cluster fails over by itself: Sentinels or Members, not both")
	case k == redisKind && c.sentinels > 0 && c.replicas < 1:
		return errors.New("Sentinels need Replicas(n ≥ 1) to fail over to")
	case k == redisKind && c.sentinels == 0 && c.members < 3:
		return errors.New("Replicas on Redis needs Sentinels, or a Cluster of Members(n ≥ 3) masters (a failover needs a majority of masters)")
	}
	return nil
}

// Failover says how [Server.Failover] brings a failover about.
type Failover int

const (
	// Crash kills the primary: SIGKILL for Redis (Sentinels, or the
	// Cluster's other masters, then elect one of its replicas), an
	// immediate shutdown for PostgreSQL (then pg_ctl promote of the
	// standby). Writes the replicas had not received are lost, as in
	// production.
	Crash Failover = iota + 1
	// Handover asks for the failover while the primary runs: SENTINEL
	// FAILOVER, CLUSTER FAILOVER on the replica, or for PostgreSQL a fast
	// (clean) shutdown of the primary before the promotion.
	Handover
)

func (f Failover) String() string {
	switch f {
	case Crash:
		return "crash"
	case Handover:
		return "handover"
	}
	return fmt.Sprintf("Failover(%d)", int(f))
}

// topology is a replicated server's failover.
type topology interface {
	// primary returns the address of the current primary (on a Cluster,
	// of the master that serves key).
	primary(ctx context.Context, key string) (string, error)
	// failover makes a replica the primary (of key, on a Cluster) as how
	// says, waits until clients can reach it and the old primary is back
	// as its replica, and returns the new primary's address.
	failover(ctx context.Context, how Failover, key string) (string, error)
}

// Failover fails the primary over to a replica as how says and returns the
// new primary's address (host:port). On a Redis Cluster it fails over the
// master that serves slot 0 (FailoverKey chooses another). It returns
// once clients can reach the new primary (the Sentinels report it, the
// Cluster's nodes agree, PostgreSQL accepts writes there) and the old
// primary serves again as the new one's replica or standby, in sync. The
// test fails if the server is not replicated.
func (s *Server) Failover(t testing.TB, how Failover) string {
	t.Helper()
	return s.FailoverKey(t, how, "")
}

// FailoverKey is Failover of the primary that serves key: on a Redis
// Cluster, the master of key's hash slot; elsewhere the one primary.
func (s *Server) FailoverKey(t testing.TB, how Failover, key string) string {
	t.Helper()
	var primary string
	s.control(t, "Failover", func() error {
		if s.topo == nil {
			return fmt.Errorf("the %s server is not replicated: start it with Replicas", s.kind.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
		defer cancel()
		var err error
		if primary, err = s.topo.failover(ctx, how, key); err != nil {
			err = fmt.Errorf("%v failover: %w\n%s", how, err, s.logTails())
		}
		return err
	})
	return primary
}

// FaultAt returns when the last Failover injected its fault (the kill
// signal, the SENTINEL FAILOVER or CLUSTER FAILOVER command, the shutdown
// of the primary): the start of the outage that clients see.
func (s *Server) FaultAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faultAt
}

// Primary returns the address of the current primary (on a Redis Cluster,
// of slot 0's master); the test fails if the server is not replicated.
func (s *Server) Primary(t testing.TB) string {
	t.Helper()
	var primary string
	s.control(t, "Primary", func() error {
		if s.topo == nil {
			return fmt.Errorf("the %s server is not replicated: start it with Replicas", s.kind.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		var err error
		primary, err = s.topo.primary(ctx, "")
		return err
	})
	return primary
}

// memberAt returns the index of the member that listens on addr.
func (s *Server) memberAt(addr string) (int, error) {
	for i, m := range s.members {
		if m.target == addr || (i < len(s.endpoints) && s.endpoints[i] == addr) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no member at %s", addr)
}
