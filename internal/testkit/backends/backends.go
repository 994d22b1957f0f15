// Package backends gives the tests of the packages built on lock (semaphore,
// leader, timers, jobs) every built-in backend at once, so that a shared
// test suite runs on each and no backend can silently miss a case. Each
// Backend makes independent instances (one per simulated process) over one
// real server found or started by internal/testkit/testenv, and can rebuild an
// instance in a child process from the environment (Env, FromEnv).
package backends

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// Backend is one backend under test.
type Backend struct {
	Name string
	// New returns a new instance, closed at the end of the test.
	New func(t testing.TB) lock.Lock
	// Env is what a child process needs to reach the same server (nil for
	// memlock, which cannot be shared across processes).
	Env []string
	// Slack is how much later than its ttl a crashed holder's grant may
	// become acquirable here: the backend's stated expiry slack plus a
	// margin for a loaded test machine (see each constructor).
	Slack time.Duration
}

// margin is the part of Slack that covers a loaded test machine (two cores,
// the race detector, servers and child processes on the same host): the
// waiter's wake-up, its attempt's round trip and scheduling delays.
const margin = 500 * time.Millisecond

// dialTimeout bounds connecting to a server.
const dialTimeout = 5 * time.Second

// EnvName is the variable that tells a child process which backend to use.
const EnvName = "LEASEHOLD_TEST_BACKEND"

// Memlock is the in-process backend: instances share one table. Its
// grants expire exactly (Slack is the margin alone).
func Memlock(t testing.TB) Backend {
	shared, err := memlock.New()
	if err != nil {
		t.Fatal(err)
	}
	return Backend{Name: "memlock", New: func(t testing.TB) lock.Lock {
		l, err := shared.Share()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}, Slack: margin}
}

// Redis is redislock on the test binary's shared Redis server. Redis
// expires a key on its own clock to the millisecond and every acquire
// checks the holder's remaining ttl (Slack is the margin alone).
func Redis(t testing.TB) Backend {
	srv := testenv.Redis(t)
	return Backend{
		Name: "redis",
		New: func(t testing.TB) lock.Lock {
			l, err := redisFromAddr(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Env:   append(srv.Env(), EnvName+"=redis"),
		Slack: margin,
	}
}

func redisFromAddr(addr string) (*closingRedis, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	l, err := redislock.New(c)
	if err != nil {
		return nil, err
	}
	return &closingRedis{l, c}, nil
}

// closingRedis closes its client with the Lock.
type closingRedis struct {
	*redislock.Lock
	c *redis.Client
}

func (r *closingRedis) Close() error {
	err := r.Lock.Close()
	_ = r.c.Close()
	return err
}

// Postgres is pglock on the test binary's shared PostgreSQL server; each
// instance has its own small pool. The server ends a holding session at
// once when its connection is reset, or ttl after its last statement
// (idle_session_timeout, to the millisecond): Slack is the margin alone.
func Postgres(t testing.TB) Backend {
	srv := testenv.Postgres(t)
	return Backend{
		Name: "postgres",
		New: func(t testing.TB) lock.Lock {
			l, err := pgFromDSN(srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Env:   append(srv.Env(), EnvName+"=postgres"),
		Slack: margin,
	}
}

func pgFromDSN(dsn string) (*pglock.Lock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return pglock.NewFromDSN(ctx, dsn+"&pool_max_conns=32")
}

// Etcd is etcdlock on the test binary's shared etcd server, with a 1 s
// minimum ttl (the test server elects in 100 ms; the library's default is 2 s).
// etcd rounds a ttl up to whole seconds and checks for expired leases twice
// a second: Slack is those 500 ms plus the margin, for ttls of whole seconds.
func Etcd(t testing.TB) Backend {
	srv := testenv.Etcd(t)
	return Backend{
		Name: "etcd",
		New: func(t testing.TB) lock.Lock {
			l, err := etcdFromEndpoints(srv.Endpoints())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return l
		},
		Env:   append(srv.Env(), EnvName+"=etcd"),
		Slack: 500*time.Millisecond + margin,
	}
}

func etcdFromEndpoints(endpoints []string) (*closingEtcd, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: dialTimeout})
	if err != nil {
		return nil, err
	}
	l, err := etcdlock.New(c, etcdlock.WithMinTTL(time.Second))
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &closingEtcd{l, c}, nil
}

// closingEtcd closes its client with the Lock.
type closingEtcd struct {
	*etcdlock.Lock
	c *clientv3.Client
}

func (e *closingEtcd) Close() error {
	err := e.Lock.Close()
	_ = e.c.Close()
	return err
}

// All returns every backend, each as a subtest-ready value. The servers are
// started lazily by testenv as the backends are asked for.
func All(t testing.TB) []func(testing.TB) Backend {
	return []func(testing.TB) Backend{Memlock, Redis, Postgres, Etcd}
}

// Networked returns the backends a child process can share.
func Networked(t testing.TB) []func(testing.TB) Backend {
	return []func(testing.TB) Backend{Redis, Postgres, Etcd}
}

// Each runs f as a subtest per backend, named for the function that makes
// it (Memlock runs as "memlock"). The backend is made inside its subtest, so
// a server that is missing (outside CI, testenv skips) skips that subtest
// alone.
func Each(t *testing.T, kinds []func(testing.TB) Backend, f func(t *testing.T, b Backend)) {
	for _, k := range kinds {
		t.Run(kindName(k), func(t *testing.T) { f(t, k(t)) })
	}
}

// kindName is the lower-cased name of the function k: "memlock" for
// Memlock, as the Backend it makes is named.
func kindName(k func(testing.TB) Backend) string {
	name := runtime.FuncForPC(reflect.ValueOf(k).Pointer()).Name()
	return strings.ToLower(name[strings.LastIndex(name, ".")+1:])
}

// FromEnv builds a backend instance in a child process from the variables
// of Backend.Env.
func FromEnv() (lock.Lock, error) {
	switch name := os.Getenv(EnvName); name {
	case "redis":
		return redisFromAddr(os.Getenv("LEASEHOLD_REDIS_ADDR"))
	case "postgres":
		return pgFromDSN(os.Getenv("LEASEHOLD_PG_DSN"))
	case "etcd":
		return etcdFromEndpoints(strings.Split(os.Getenv("LEASEHOLD_ETCD_ENDPOINTS"), ","))
	default:
		return nil, fmt.Errorf("backends: %s=%q names no networked backend", EnvName, name)
	}
}
