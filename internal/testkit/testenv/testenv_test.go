package testenv_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func redisClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func pgConnect(t *testing.T, dsn string) *pgx.Conn {
	ctx := ctxFor(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func etcdClient(t *testing.T, endpoints ...string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func TestSharedRedis(t *testing.T) {
	t.Parallel()
	s := testenv.Redis(t)
	if again := testenv.Redis(t); again != s {
		t.Fatalf("second Redis(t) = %s, want the shared %s", again.Addr(), s.Addr())
	}
	ctx := ctxFor(t)
	rdb := redisClient(t, s.Addr())
	if err := rdb.Set(ctx, "testenv:shared", "v1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, "testenv:shared").Result(); err != nil || got != "v1" {
		t.Fatalf("GET = %q, %v; want v1", got, err)
	}
}

func TestSharedPostgres(t *testing.T) {
	t.Parallel()
	s := testenv.Postgres(t)
	if !strings.HasPrefix(s.DSN(), "postgres://") {
		t.Fatalf("DSN() = %q", s.DSN())
	}
	var version string
	if err := pgConnect(t, s.DSN()).QueryRow(ctxFor(t), "SELECT version()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(version, "PostgreSQL") {
		t.Fatalf("version() = %q", version)
	}
	t.Log(version)
}

func TestSharedEtcd(t *testing.T) {
	t.Parallel()
	s := testenv.Etcd(t)
	ctx := ctxFor(t)
	cli := etcdClient(t, s.Endpoints()...)
	if _, err := cli.Put(ctx, "testenv/shared", "v1"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "testenv/shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("Get = %v, want v1", resp.Kvs)
	}
}

func TestRedisRestart(t *testing.T) {
	t.Parallel()
	s := testenv.NewRedis(t)
	addr := s.Addr()
	ctx := ctxFor(t)
	rdb := redisClient(t, addr)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("address after Restart = %s, want %s", s.Addr(), addr)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil (data lost)", err)
	}

	s.Stop(t)
	s.Stop(t) // idempotent
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("the stopped server still accepts connections")
	}
	s.Start(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
}

func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	s := testenv.NewPostgres(t)
	startTime := func() time.Time {
		var ts time.Time
		if err := pgConnect(t, s.DSN()).QueryRow(ctxFor(t), "SELECT pg_postmaster_start_time()").Scan(&ts); err != nil {
			t.Fatal(err)
		}
		return ts
	}
	before, addr := startTime(), s.Addr()
	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("address after Restart = %s, want %s", s.Addr(), addr)
	}
	if after := startTime(); !after.After(before) {
		t.Fatalf("postmaster start time %v after Restart, was %v: not restarted", after, before)
	}
}

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	s := testenv.NewEtcd(t, testenv.Members(3))
	eps := s.Endpoints()
	if len(eps) != 3 || s.Addr() != eps[0] {
		t.Fatalf("Endpoints() = %v, Addr() = %s; want 3 members, Addr the first", eps, s.Addr())
	}
	ctx := ctxFor(t)
	if _, err := etcdClient(t, eps...).Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}

	s.StopMember(t, 1)
	// A proposal made while leadership moves can be dropped and time out,
	// so the write gets a few short tries.
	cli := etcdClient(t, eps[0], eps[2])
	var err error
	for try := 0; try < 5; try++ {
		putCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cli.Put(putCtx, "k", "during")
		cancel()
		if err == nil {
			break
		}
		t.Logf("Put with member 1 stopped, try %d: %v", try+1, err)
	}
	if err != nil {
		t.Fatalf("Put with member 1 stopped: %v", err)
	}

	s.StartMember(t, 1)
	resp, err := etcdClient(t, eps[1]).Get(ctx, "k") // linearizable: member 1 caught up
	if err != nil {
		t.Fatalf("Get from the rejoined member: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "during" {
		t.Fatalf("rejoined member has %v, want k=during", resp.Kvs)
	}
}

const (
	childKeyVar  = "LEASEHOLD_TESTENV_CHILD_KEY"  // set only in TestEnvRoundTrip's child
	childKindVar = "LEASEHOLD_TESTENV_CHILD_KIND" // redis, postgres or etcd
)

// TestEnvRoundTrip runs TestEnvChild in a child process with a shared
// server's Env() and checks that the child reaches the same server: it
// finds a mark the parent left there (a Redis or etcd key; for PostgreSQL,
// a session advisory lock the parent holds, which needs no privilege).
func TestEnvRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"redis", "postgres", "etcd"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			key := "testenv:env:" + rand.Text()
			var s *testenv.Server
			switch kind {
			case "redis":
				s = testenv.Redis(t)
				if err := redisClient(t, s.Addr()).Set(ctxFor(t), key, s.Addr(), time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			case "postgres":
				s = testenv.Postgres(t)
				var locked bool
				if err := pgConnect(t, s.DSN()).QueryRow(ctxFor(t), "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&locked); err != nil || !locked {
					t.Fatalf("advisory lock: %v %v", locked, err)
				}
			case "etcd":
				s = testenv.Etcd(t)
				if _, err := etcdClient(t, s.Endpoints()...).Put(ctxFor(t), key, s.Addr()); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.CommandContext(ctxFor(t), os.Args[0], "-test.run=^TestEnvChild$", "-test.count=1", "-test.v")
			cmd.Env = append(append(os.Environ(), s.Env()...), childKeyVar+"="+key, childKindVar+"="+kind)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestEnvChild") {
				t.Fatalf("child with %v: %v\n%s", s.Env(), err, out)
			}
		})
	}
}

func TestEnvChild(t *testing.T) {
	key := os.Getenv(childKeyVar)
	if key == "" {
		t.Skip("helper process for TestEnvRoundTrip")
	}
	switch kind := os.Getenv(childKindVar); kind {
	case "redis":
		s := testenv.Redis(t)
		got, err := redisClient(t, s.Addr()).Get(ctxFor(t), key).Result()
		if err != nil {
			t.Fatalf("child GET %s at %s: %v", key, s.Addr(), err)
		}
		if got != s.Addr() {
			t.Fatalf("child at %s read %q, written by the parent at that address", s.Addr(), got)
		}
	case "postgres":
		s := testenv.Postgres(t)
		var locked bool
		if err := pgConnect(t, s.DSN()).QueryRow(ctxFor(t), "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&locked); err != nil {
			t.Fatalf("child at %s: %v", s.DSN(), err)
		}
		if locked {
			t.Fatalf("child at %s took the advisory lock the parent holds: not the parent's server", s.DSN())
		}
	case "etcd":
		s := testenv.Etcd(t)
		resp, err := etcdClient(t, s.Endpoints()...).Get(ctxFor(t), key)
		if err != nil {
			t.Fatalf("child Get %s at %v: %v", key, s.Endpoints(), err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != s.Addr() {
			t.Fatalf("child at %s read %v, want the parent's mark %q", s.Addr(), resp.Kvs, s.Addr())
		}
	default:
		t.Fatalf("%s=%q", childKindVar, kind)
	}
}

const failingChildVar = "LEASEHOLD_TESTENV_FAILING_CHILD" // set only in TestFailingChild's process

// TestDedicatedServersStopWhenTheTestFails runs TestFailingChild in a child
// process: a test that starts a dedicated server of each kind and fails.
// The servers must be stopped when that test ends (checked in the child by
// the next subtest, while the process still runs, and again here).
func TestDedicatedServersStopWhenTheTestFails(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(ctxFor(t), os.Args[0], "-test.run=^TestFailingChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), failingChildVar+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the failing child did not fail: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "--- SKIP: TestFailingChild/fails") {
		t.Skipf("no dedicated servers in the child:\n%s", out)
	}
	for _, want := range []string{"--- FAIL: TestFailingChild/fails ", "--- PASS: TestFailingChild/stopped "} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("child output lacks %q:\n%s", want, out)
		}
	}
	_, line, _ := strings.Cut(string(out), "SERVERS ")
	line, _, _ = strings.Cut(line, "\n")
	addrs := strings.Fields(line)
	if len(addrs) != 3 {
		t.Fatalf("child reported servers %q, want 3 addresses:\n%s", line, out)
	}
	for _, addr := range addrs {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after the child exited", addr)
		}
	}
}

func TestFailingChild(t *testing.T) {
	if os.Getenv(failingChildVar) == "" {
		t.Skip("helper process for TestDedicatedServersStopWhenTheTestFails")
	}
	var addrs []string
	t.Run("fails", func(t *testing.T) {
		for _, s := range []*testenv.Server{testenv.NewRedis(t), testenv.NewPostgres(t), testenv.NewEtcd(t)} {
			addrs = append(addrs, s.Addr())
		}
		fmt.Printf("SERVERS %s\n", strings.Join(addrs, " "))
		t.Fatal("failing on purpose, with dedicated servers running")
	})
	t.Run("stopped", func(t *testing.T) {
		if len(addrs) != 3 {
			t.Fatalf("servers %v, want 3", addrs)
		}
		for _, addr := range addrs {
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Errorf("%s still accepts connections after the failed test that started it ended", addr)
			}
		}
	})
}

// TestEtcdIsolateLeader isolates the leader of a cluster from its peers
// (PeerProxies): the two others elect a new leader while the isolated
// member's client port still answers; healed, the three agree on one
// leader again and the member has caught up.
func TestEtcdIsolateLeader(t *testing.T) {
	t.Parallel()
	s := testenv.NewEtcd(t, testenv.Members(3), testenv.PeerProxies())
	eps := s.Endpoints()
	ctx := ctxFor(t)
	cli := etcdClient(t, eps...)
	// leaders returns the leader each member sees (0: none; an error when
	// its client port does not answer).
	leaders := func() ([]uint64, []uint64, []error) {
		ids, leads, errs := make([]uint64, len(eps)), make([]uint64, len(eps)), make([]error, len(eps))
		for i, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if errs[i] = err; err == nil {
				ids[i], leads[i] = st.Header.MemberId, st.Leader
			}
		}
		return ids, leads, errs
	}
	// agreed waits until the members in idx see one leader, not avoid,
	// and returns its index.
	agreed := func(idx []int, avoid uint64) int {
		deadline := time.Now().Add(15 * time.Second)
		for {
			ids, leads, errs := leaders()
			lead, ok := leads[idx[0]], true
			for _, i := range idx {
				ok = ok && errs[i] == nil && leads[i] == lead && lead != 0 && lead != avoid
			}
			if ok {
				for i, id := range ids {
					if id == lead {
						return i
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("members %v do not agree on a leader (other than %x): leaders %x, errors %v", idx, avoid, leads, errs)
			}
			<-time.After(50 * time.Millisecond)
		}
	}
	all := []int{0, 1, 2}
	old := agreed(all, 0)
	ids, _, _ := leaders()
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}

	s.IsolateMember(t, old)
	cut := time.Now()
	var others []int
	for i := range eps {
		if i != old {
			others = append(others, i)
		}
	}
	next := agreed(others, ids[old])
	t.Logf("member %d, the leader, isolated; the others elected member %d in %v", old, next, time.Since(cut).Round(time.Millisecond))
	// The isolated member's client port answers, but it has no quorum: a
	// linearizable read through it fails.
	alone := etcdClient(t, eps[old])
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	st, err := alone.Status(sctx, eps[old])
	cancel()
	if err != nil {
		t.Fatalf("the isolated member's client port: %v", err)
	}
	t.Logf("the isolated member sees leader %x", st.Leader)
	gctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = alone.Get(gctx, "k")
	cancel()
	if err == nil {
		t.Fatal("a linearizable read through the isolated member succeeded")
	}
	majority := etcdClient(t, eps[others[0]], eps[others[1]])
	for try := 0; ; try++ { // a proposal made while leadership moves can time out
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = majority.Put(pctx, "k", "during")
		cancel()
		if err == nil || try == 4 {
			break
		}
	}
	if err != nil {
		t.Fatalf("Put through the majority: %v", err)
	}

	s.HealMember(t, old)
	lead := agreed(all, 0)
	resp, err := alone.Get(ctx, "k") // linearizable: the member caught up
	if err != nil {
		t.Fatalf("Get from the healed member: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "during" {
		t.Fatalf("the healed member has %v, want k=during", resp.Kvs)
	}

	// Both directions: an isolated follower loses its leader too, though
	// it dials the leader's streams itself (from which it would hear the
	// heartbeats were only the traffic to it cut).
	follower := (lead + 1) % len(eps)
	s.IsolateMember(t, follower)
	for deadline := time.Now().Add(10 * time.Second); ; <-time.After(50 * time.Millisecond) {
		_, leads, _ := leaders()
		if leads[follower] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("isolated follower %d still sees leader %x", follower, leads[follower])
		}
	}
	s.HealMember(t, follower)
	agreed(all, 0)
}
