package chaos_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Each run has servers of its own: runs go in parallel (go test's
// -parallel, GOMAXPROCS by default, bounds how many at once).

func TestNemesisRedis(t *testing.T) { t.Parallel(); runNemesis(t, redisTarget(t), chaosConfig(t)) }

func TestNemesisPostgres(t *testing.T) {
	t.Parallel()
	runNemesis(t, postgresTarget(t), chaosConfig(t))
}

func TestNemesisEtcd(t *testing.T) { t.Parallel(); runNemesis(t, etcdTarget(t), chaosConfig(t)) }

// A three-member etcd cluster whose members (the leader among them) the
// nemesis stops and starts again, besides the proxy faults; each worker
// reaches every member through a proxy of its own.
func TestNemesisEtcdCluster(t *testing.T) {
	for _, workload := range []string{"lock", "leader"} {
		t.Run(workload, func(t *testing.T) {
			t.Parallel()
			c := chaosConfig(t)
			c.leader = workload == "leader"
			c.duration += c.duration / 2 // elections after the kills take time from the workers
			runNemesis(t, etcdClusterTarget(t), c)
		})
	}
}

// The semaphore workload: four workers share three slots.
func TestNemesisSemaphore(t *testing.T) {
	for name, tg := range map[string]func(*testing.T) target{"redis": redisTarget, "postgres": postgresTarget, "etcd": etcdTarget} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := chaosConfig(t)
			c.slots = 3
			runNemesis(t, tg(t), c)
		})
	}
}

// The reader-writer workload: four workers take one key shared or
// exclusive at random; writers write to a fenced resource, and no share's
// validity may overlap a writer's.
func TestNemesisReadersWriter(t *testing.T) {
	for name, tg := range map[string]func(*testing.T) target{"redis": redisTarget, "postgres": postgresTarget, "etcd": etcdTarget} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := chaosConfig(t)
			c.rw = true
			runNemesis(t, tg(t), c)
		})
	}
}

// The leader workload: four candidates, term-stamped writes.
func TestNemesisLeader(t *testing.T) {
	for name, tg := range map[string]func(*testing.T) target{"redis": redisTarget, "postgres": postgresTarget, "etcd": etcdTarget} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := chaosConfig(t)
			c.leader = true
			runNemesis(t, tg(t), c)
		})
	}
}

func redisTarget(t *testing.T) target {
	srv := testenv.NewRedis(t)
	return target{
		name: "redis", ttl: 500 * time.Millisecond, addrs: srv.Endpoints(), losesGrants: true,
		connect: func(t *testing.T, proxies []string) (lock.Lock, func()) {
			c := redis.NewClient(&redis.Options{Addr: proxies[0], DialTimeout: time.Second, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
			l, err := redislock.New(c)
			if err != nil {
				t.Fatal(err)
			}
			return l, func() { _ = l.Close(); _ = c.Close() }
		},
		restart: srv.Restart,
		registry: func(t *testing.T, proxies []string) (jobs.Registry, func()) {
			c := redis.NewClient(&redis.Options{Addr: proxies[0], DialTimeout: time.Second, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
			reg, err := redisjobs.New(c, "chaos")
			if err != nil {
				t.Fatal(err)
			}
			return reg, func() { _ = c.Close() }
		},
	}
}

func postgresTarget(t *testing.T) target {
	srv := testenv.NewPostgres(t)
	return target{
		// A crash restart ends every session, and so every grant; holders
		// learn it from their connection (LossNotifier). The restarted
		// server grants nothing before their ValidUntil (pglock's
		// quarantine): a restart excuses no overlap.
		name: "postgres", ttl: time.Second, addrs: srv.Endpoints(), losesGrants: true, quarantines: true, resetFrees: true,
		connect: func(t *testing.T, proxies []string) (lock.Lock, func()) {
			_, port, _ := net.SplitHostPort(proxies[0])
			dsn := strings.Replace(srv.DSN(), srv.Addr(), "127.0.0.1:"+port, 1) + "&connect_timeout=2"
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := pglock.NewFromDSN(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			return l, func() { _ = l.Close() }
		},
		restart: srv.Restart,
		registry: func(t *testing.T, proxies []string) (jobs.Registry, func()) {
			_, port, _ := net.SplitHostPort(proxies[0])
			dsn := strings.Replace(srv.DSN(), srv.Addr(), "127.0.0.1:"+port, 1) + "&connect_timeout=2"
			pool, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			reg, err := pgjobs.New(pool, "chaos_jobs")
			if err != nil {
				t.Fatal(err)
			}
			return reg, pool.Close
		},
	}
}

func etcdTarget(t *testing.T) target { return etcdOn(testenv.NewEtcd(t)) }

// etcdOn is the target of an etcd server or cluster.
func etcdOn(srv *testenv.Server) target {
	mem := memjobs.New()
	return target{
		// etcd keeps leases across a restart (its WAL is fsynced), and
		// extends them on a new leader: a restart loses no grant.
		name: "etcd", ttl: time.Second, addrs: srv.Endpoints(),
		connect: func(t *testing.T, proxies []string) (lock.Lock, func()) {
			c, err := clientv3.New(clientv3.Config{Endpoints: proxies, DialTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			l, err := etcdlock.New(c, etcdlock.WithMinTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return l, func() { _ = l.Close(); _ = c.Close() }
		},
		restart: srv.Restart,
		// etcd has no jobs registry: the workers share one in memory, and
		// only the recovery election runs on etcd.
		registry: func(*testing.T, []string) (jobs.Registry, func()) { return mem, func() {} },
	}
}

func etcdClusterTarget(t *testing.T) target {
	srv := testenv.NewEtcd(t, testenv.Members(3))
	tg := etcdOn(srv)
	tg.name = "etcd-cluster"
	tg.killMember = func(t *testing.T, pick int, leader bool, down time.Duration, note func(string, ...any)) {
		what := fmt.Sprintf("member %d", pick)
		if i := etcdLeader(srv.Endpoints()); leader && i >= 0 {
			pick, what = i, fmt.Sprintf("member %d, the leader", i)
		}
		note("stop %s for %v", what, down)
		srv.StopMember(t, pick)
		sleep(context.Background(), down)
		srv.StartMember(t, pick)
	}
	return tg
}

// etcdIsolatingTarget is a three-member etcd cluster whose peer traffic
// goes through proxies, so that the nemesis can cut the leader member off
// from its peers while the workers still talk to it.
func etcdIsolatingTarget(t *testing.T) target {
	srv := testenv.NewEtcd(t, testenv.Members(3), testenv.PeerProxies())
	tg := etcdOn(srv)
	tg.name = "etcd-isolated"
	tg.isolateLeader = func(t *testing.T, down time.Duration, note func(string, ...any)) (int, time.Time, time.Time) {
		i := etcdLeader(srv.Endpoints())
		if i < 0 {
			note("no leader to isolate")
			return -1, time.Time{}, time.Time{}
		}
		note("isolate member %d, the leader, from its peers for %v", i, down)
		srv.IsolateMember(t, i)
		from := time.Now()
		sleep(context.Background(), down)
		to := time.Now()
		srv.HealMember(t, i)
		return i, from, to
	}
	return tg
}

// etcdLeader returns the index of the cluster's leader among endpoints,
// or -1 when none answers.
func etcdLeader(endpoints []string) int {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second})
	if err != nil {
		return -1
	}
	defer c.Close()
	for i, ep := range endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, ep)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}
