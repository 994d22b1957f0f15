package chaos_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// The failover nemesis: while the lock, timers and jobs workloads (with
// LEASEHOLD_CHAOS=1 also the semaphore and the leader) run on one
// replicated server, each through clients of its own, the primary fails
// over again and again, by a crash and by a handover in turn; then the
// checker goes through each workload's history. A failover excuses
// nothing (history.check): with replica acks and on PostgreSQL no two
// grants overlap, tokens increase, every loss is reported, no tick runs
// twice and no job is lost. The ttl is longer than a failover takes, so
// that grants made before one are still valid after it: a shorter one
// would expire every grant during the failover and prove nothing.
//
// The clients talk to the servers directly (a failover client follows the
// Sentinels, a Cluster client the slots, a multi-host DSN the read-write
// member): the nemesis's faults are the failovers alone.

// failoverTTL is the grants' ttl in the failover runs: longer than a
// failover (2 to 10 s), so that grants live across one.
const failoverTTL = 10 * time.Second

// failoverTarget is a replicated server under the failover nemesis.
type failoverTarget struct {
	target
	srv *testenv.Server
	// failover fails the primary over as how says: on a Cluster the master
	// of key's slot.
	failover func(t *testing.T, how testenv.Failover, key string)
	// beforeCrash, when set, runs just before each crash of the primary of
	// key (the proof's replica cut).
	beforeCrash func(t *testing.T, key string)
	crashesOnly bool // every failover is a crash
	// safe: the topology promises grant safety across a failover, and a
	// violation fails the test; otherwise the runs record what the checker
	// sees.
	safe bool
}

// TestFailoverSentinelAcks: Redis, a primary and one replica behind three
// Sentinels; redislock and redisjobs with WithReplicaAcks(1, …).
func TestFailoverSentinelAcks(t *testing.T) {
	t.Parallel()
	runFailovers(t, sentinelTarget(t, true), failoverConfigs(t))
}

// TestFailoverSentinelNoAcks: the same without replica acks. A failover may
// lose a grant made just before it; the runs record what the checker sees
// and fail only if nothing was exercised. docs/guarantees.md states what it
// saw.
func TestFailoverSentinelNoAcks(t *testing.T) {
	t.Parallel()
	runFailovers(t, sentinelTarget(t, false), failoverConfigs(t))
}

// TestFailoverCluster: a Redis Cluster of three masters with one replica
// each, with replica acks; each failover is of the master of one
// workload's keys (the lock's key, the jobs registry's slot, the timer's
// name), in turn.
func TestFailoverCluster(t *testing.T) {
	t.Parallel()
	runFailovers(t, clusterTarget(t), failoverConfigs(t))
}

// TestFailoverPostgres: PostgreSQL, a primary and a synchronous standby,
// through a multi-host DSN. Every failover frees every grant (advisory
// locks are not replicated): the holders must be told, and nothing may
// overlap.
func TestFailoverPostgres(t *testing.T) {
	t.Parallel()
	runFailovers(t, standbyTarget(t), failoverConfigs(t))
}

// The failover check can fail: without replica acks, the replica is cut
// off from the primary (cutReplicas) before each crash, and the primary is
// killed just after a grant made once the grant the replica last saw had
// expired. That grant is not
// on the replica that is promoted, so the key is free on the new primary
// while its holder (who holds a grant 6 to 7 s, longer than the failover
// takes) still holds it, until its next renewal finds it gone. The checker
// must report the overlaps.
//
// It belongs to the long tier (LEASEHOLD_CHAOS=1): an overlap needs a
// waiter granted before the holder's renewal after the failover finds the
// grant gone, a race that two crashes almost always, not always, show
// (seed 703681: 2 overlaps, 773 ms in all). redislock's
// TestFailoverLosesAGrantWithoutAcks shows the same loss deterministically
// in every run.
func TestFailoverCheckCanFail(t *testing.T) {
	if os.Getenv("LEASEHOLD_CHAOS") != "1" {
		t.Skip("long tier: LEASEHOLD_CHAOS=1 (redislock's TestFailoverLosesAGrantWithoutAcks shows the loss in every run)")
	}
	t.Parallel()
	ft := sentinelTarget(t, false)
	srv := ft.srv
	ft.crashesOnly = true
	ft.beforeCrash = func(t *testing.T, key string) {
		primary := redis.NewClient(&redis.Options{Addr: srv.Primary(t)})
		defer primary.Close()
		grant := redislock.DefaultPrefix + "lk:{" + key + "}" // redislock's key of key
		pttl, err := primary.PTTL(t.Context(), grant).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The replica keeps the grant of now, which ends within its ttl.
		expired := time.Now().Add(max(pttl, 0) + 100*time.Millisecond)
		cutReplicas(t, srv)
		sleep(context.Background(), time.Until(expired))
		last, _ := primary.Get(t.Context(), grant).Result()
		for deadline := time.Now().Add(failoverTTL); ; {
			if v, _ := primary.Get(t.Context(), grant).Result(); v != "" && v != last {
				return // a new grant, that the replica does not see
			}
			if time.Now().After(deadline) {
				t.Fatal("no grant after the cut")
			}
			sleep(context.Background(), 5*time.Millisecond)
		}
	}
	c := chaosConfig(t)
	c.name, c.minHold, c.hold, c.duration, c.failovers = "lock", 6*time.Second, 7*time.Second, 0, 2
	r := failoverRuns(t, ft, []config{c})[0]
	bad := r.finish(t)
	n, total, longest := r.h.overlaps()
	t.Logf("the checker's violations (%d): %v", len(bad), bad[:min(len(bad), 5)])
	t.Logf("overlaps: %d, %v in all, the longest %v", n, total.Round(time.Millisecond), longest.Round(time.Millisecond))
	if n == 0 || !strings.Contains(strings.Join(bad, "\n"), "grant safety") {
		r.fail(t, bad)
		t.Fatalf("the checker saw no overlap across failovers that lost grants")
	}
}

// failoverConfigs are the workloads of a failover run: the lock, the timers
// and the jobs; with LEASEHOLD_CHAOS=1 also the semaphore and the leader.
// The nemesis fails over at least twice, and (long tier) until a minute
// has passed.
func failoverConfigs(t *testing.T) []config {
	base := chaosConfig(t)
	base.failovers, base.hold = 2, 300*time.Millisecond
	if os.Getenv("LEASEHOLD_CHAOS") != "1" {
		base.duration = 0
	}
	lk, tm, jb := base, base, base
	lk.name = "lock"
	tm.name, tm.timers = "timers", 1
	jb.name, jb.jobs = "jobs", true
	cs := []config{lk, tm, jb}
	if os.Getenv("LEASEHOLD_CHAOS") == "1" {
		sem, ld := base, base
		sem.name, sem.slots = "semaphore", 3
		ld.name, ld.leader = "leader", true
		cs = append(cs, sem, ld)
	}
	return cs
}

// runFailovers runs the workloads cs on ft under the failover nemesis and
// checks each one's history: a violation fails the test where ft is safe,
// and is logged, with the overlaps' count and length, where it is not.
func runFailovers(t *testing.T, ft failoverTarget, cs []config) {
	labelRun(t)
	for _, r := range failoverRuns(t, ft, cs) {
		bad := r.finish(t)
		n, total, longest := r.h.overlaps()
		t.Logf("%s: %d violations; overlaps: %d, %v in all, the longest %v; history in %s", r.h.Backend, len(bad), n, total.Round(time.Millisecond), longest.Round(time.Millisecond), r.h.save())
		switch {
		case len(bad) > 0 && ft.safe:
			r.fail(t, bad)
		case len(bad) > 0:
			t.Logf("%s: without replica acks (seed %d): %v", r.h.Backend, r.c.seed, bad[:min(len(bad), 5)])
		}
		r.report(t)
	}
	checkGoroutines(t)
}

// failoverRuns starts the workloads cs on ft and fails its primary over,
// a crash and a handover in turn, a second or two apart, until it has done
// so cs[0].failovers times and cs[0].duration has passed; it returns the
// runs, their workers stopped (the jobs workload's still going until its
// finish).
func failoverRuns(t *testing.T, ft failoverTarget, cs []config) []*run {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs []*run
	var keys []string
	for _, c := range cs {
		r := startRun(t, ft.target, c, ctx)
		runs = append(runs, r)
		keys = append(keys, r.key)
		if c.jobs {
			keys = append(keys, "{"+chaosJobs+"}") // the registry's slot
		}
	}
	c := cs[0]
	rng := rand.New(rand.NewPCG(uint64(c.seed), 5))
	begin := time.Now()
	for n := 0; n < c.failovers || time.Since(begin) < c.duration; n++ {
		sleep(ctx, time.Second+time.Duration(rng.Int64N(int64(time.Second))))
		how, key := testenv.Crash, keys[n%len(keys)]
		if n%2 == 1 && !ft.crashesOnly {
			how = testenv.Handover
		}
		from := time.Now()
		if how == testenv.Crash && ft.beforeCrash != nil {
			ft.beforeCrash(t, key)
		}
		ft.failover(t, how, key)
		to := time.Now()
		for _, r := range runs {
			r.h.fault("%v failover (of %q's primary), %v", how, key, to.Sub(from).Round(time.Millisecond))
			r.h.failedOver(how.String(), from, to)
		}
	}
	sleep(ctx, 2*time.Second) // the workloads go on after the last failover
	return runs
}

// chaosJobs is the jobs registry's namespace on Redis.
const chaosJobs = "chaos"

func sentinelTarget(t *testing.T, acks bool) failoverTarget {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	name := "sentinel-noacks"
	var lockOpts []redislock.Option
	var jobOpts []redisjobs.Option
	if acks {
		name = "sentinel-acks"
		lockOpts = append(lockOpts, redislock.WithReplicaAcks(1, 500*time.Millisecond))
		jobOpts = append(jobOpts, redisjobs.WithReplicaAcks(1, 500*time.Millisecond))
	}
	client := func() *redis.Client {
		o := srv.FailoverOptions()
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, 2*time.Second, time.Second
		return redis.NewFailoverClient(o)
	}
	return failoverTarget{target: redisFailoverTarget(name, func() redis.UniversalClient { return client() }, lockOpts, jobOpts),
		srv: srv, failover: func(t *testing.T, how testenv.Failover, _ string) { srv.Failover(t, how) }, safe: acks}
}

func clusterTarget(t *testing.T) failoverTarget {
	srv := testenv.NewRedis(t, testenv.Members(3), testenv.Replicas(1))
	client := func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Endpoints(), ContextTimeoutEnabled: true,
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second})
	}
	return failoverTarget{target: redisFailoverTarget("cluster-acks", client,
		[]redislock.Option{redislock.WithReplicaAcks(1, 500*time.Millisecond)},
		[]redisjobs.Option{redisjobs.WithReplicaAcks(1, 500*time.Millisecond)}),
		srv: srv, failover: func(t *testing.T, how testenv.Failover, key string) { srv.FailoverKey(t, how, key) }, safe: true}
}

// redisFailoverTarget is a Redis target whose clients come from client
// (they follow the primary themselves: the proxies are not used).
func redisFailoverTarget(name string, client func() redis.UniversalClient,
	lockOpts []redislock.Option, jobOpts []redisjobs.Option) target {
	return target{
		name: name, ttl: failoverTTL,
		connect: func(t *testing.T, _ []string) (lock.Lock, func()) {
			c := client()
			l, err := redislock.New(c, lockOpts...)
			if err != nil {
				t.Fatal(err)
			}
			return l, func() { _ = l.Close(); _ = c.Close() }
		},
		registry: func(t *testing.T, _ []string) (jobs.Registry, func()) {
			c := client()
			reg, err := redisjobs.New(c, chaosJobs, jobOpts...)
			if err != nil {
				t.Fatal(err)
			}
			return reg, func() { _ = c.Close() }
		},
	}
}

func standbyTarget(t *testing.T) failoverTarget {
	srv := testenv.NewPostgres(t, testenv.Replicas(1))
	dsn := srv.DSN() + "&connect_timeout=2"
	return failoverTarget{
		target: target{
			name: "postgres-standby", ttl: failoverTTL, quarantines: true,
			connect: func(t *testing.T, _ []string) (lock.Lock, func()) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, err := pglock.NewFromDSN(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				return l, func() { _ = l.Close() }
			},
			registry: func(t *testing.T, _ []string) (jobs.Registry, func()) {
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
		},
		srv: srv, failover: func(t *testing.T, how testenv.Failover, _ string) { srv.Failover(t, how) }, safe: true,
	}
}

// cutReplicas cuts the replicas of srv off from its primary: the primary
// refuses them PSYNC and SYNC (ACL) and drops its links to them, so that
// no write made after it reaches them, while they go on answering (the
// Sentinels can promote one at once).
func cutReplicas(t *testing.T, srv *testenv.Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Primary(t)})
	defer c.Close()
	for _, cmd := range [][]any{{"ACL", "SETUSER", "default", "-psync", "-sync"}, {"CLIENT", "KILL", "TYPE", "replica"}} {
		if err := c.Do(t.Context(), cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
}
