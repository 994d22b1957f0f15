package testenv_test

import (
	"context"
	"crypto/rand"
	"errors"
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

	"github.com/leasehold-go/leasehold/internal/testenv"
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

const childKeyVar = "LEASEHOLD_TESTENV_CHILD_KEY" // set only in TestEnvRoundTrip's child

// TestEnvRoundTrip runs TestEnvChild in a child process with Env() and checks
// that it reaches the same Redis.
func TestEnvRoundTrip(t *testing.T) {
	t.Parallel()
	s := testenv.Redis(t)
	key := "testenv:env:" + rand.Text()
	if err := redisClient(t, s.Addr()).Set(ctxFor(t), key, s.Addr(), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctxFor(t), os.Args[0], "-test.run=^TestEnvChild$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), s.Env()...), childKeyVar+"="+key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestEnvChild") {
		t.Fatalf("child with %v: %v\n%s", s.Env(), err, out)
	}
}

func TestEnvChild(t *testing.T) {
	key := os.Getenv(childKeyVar)
	if key == "" {
		t.Skip("helper process for TestEnvRoundTrip")
	}
	s := testenv.Redis(t)
	got, err := redisClient(t, s.Addr()).Get(ctxFor(t), key).Result()
	if err != nil {
		t.Fatalf("child GET %s at %s: %v", key, s.Addr(), err)
	}
	if got != s.Addr() {
		t.Fatalf("child at %s read %q, written by the parent at that address", s.Addr(), got)
	}
}
