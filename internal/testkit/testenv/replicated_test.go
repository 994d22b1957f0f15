package testenv_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// longCtx bounds a test that fails over several times.
func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// retry calls f until it returns nil or ctx ends: the first calls after a
// failover may meet a dead connection.
func retry(ctx context.Context, t *testing.T, what string, f func() error) {
	t.Helper()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A write acknowledged by a replica (WAIT) survives both kinds of
// failover, and a failover client follows the primary the Sentinels name.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	s := testenv.NewRedis(t, testenv.Replicas(2), testenv.Sentinels(3))
	if got, want := s.SentinelURL(), "redis+sentinel://"+strings.Join(s.SentinelAddrs(), ",")+"/"+testenv.SentinelMaster; got != want || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("SentinelURL() = %q, want %q with 3 Sentinels", got, want)
	}
	if p := s.Primary(t); p != s.Addr() {
		t.Fatalf("Primary() = %s, want the first primary %s", p, s.Addr())
	}
	ctx := longCtx(t)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.SentinelMaster, SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	primary := s.Addr()
	for i, how := range []testenv.Failover{testenv.Crash, testenv.Handover, testenv.Crash} {
		key := "k" + how.String()
		retry(ctx, t, "SET", func() error { return rdb.Set(ctx, key, i, 0).Err() })
		if n, err := rdb.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || n != 2 {
			t.Fatalf("WAIT 2: %d, %v", n, err)
		}
		next := s.Failover(t, how)
		if next == primary {
			t.Fatalf("%v failover %d: the primary is still %s", how, i, next)
		}
		if p := s.Primary(t); p != next {
			t.Fatalf("Primary() = %s after the failover to %s", p, next)
		}
		primary = next
		retry(ctx, t, "GET after the failover", func() error {
			got, err := rdb.Get(ctx, key).Int()
			if err == nil && got != i {
				t.Fatalf("GET %s = %d, want %d", key, got, i)
			}
			return err
		})
		role, err := redisClient(t, next).Do(ctx, "ROLE").Slice()
		if err != nil || role[0] != "master" {
			t.Fatalf("ROLE of the new primary: %v, %v", role, err)
		}
	}
}

// On a Cluster with replicas, the master of a key's slot fails over to its
// replica, by a crash and by CLUSTER FAILOVER; the other masters stay.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	s := testenv.NewRedis(t, testenv.Members(3), testenv.Replicas(1))
	if n := len(s.Endpoints()); n != 6 {
		t.Fatalf("%d endpoints, want 6", n)
	}
	ctx := longCtx(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Endpoints()})
	t.Cleanup(func() { _ = rdb.Close() })
	const key = "failover-key"
	for i, how := range []testenv.Failover{testenv.Crash, testenv.Handover} {
		// SET and WAIT on one connection to the key's master: WAIT counts
		// the replicas that have this connection's writes. (Sent through
		// the cluster client, WAIT, which has no key, went to any node: a
		// replica refused it, in one CI run.)
		retry(ctx, t, "SET and WAIT on the key's master", func() error {
			node, err := rdb.MasterForKey(ctx, key)
			if err != nil {
				return err
			}
			pipe := node.Pipeline()
			pipe.Set(ctx, key, i, 0)
			wait := pipe.Do(ctx, "WAIT", 1, 5000)
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			if n, _ := wait.Int(); n != 1 {
				return fmt.Errorf("WAIT 1: %d replicas have the write", n)
			}
			return nil
		})
		next := s.FailoverKey(t, how, key)
		retry(ctx, t, "GET after the failover", func() error {
			got, err := rdb.Get(ctx, key).Int()
			if err == nil && got != i {
				t.Fatalf("GET %s = %d, want %d", key, got, i)
			}
			return err
		})
		role, err := redisClient(t, next).Do(ctx, "ROLE").Slice()
		if err != nil || role[0] != "master" {
			t.Fatalf("ROLE of the new master %s: %v, %v", next, role, err)
		}
	}
}

// A committed row survives both kinds of failover, and the multi-host DSN
// reaches whichever member is the primary.
func TestPostgresStandbyFailover(t *testing.T) {
	t.Parallel()
	s := testenv.NewPostgres(t, testenv.Replicas(1))
	if !strings.Contains(s.DSN(), "target_session_attrs=read-write") || len(s.Endpoints()) != 2 {
		t.Fatalf("DSN() = %q, endpoints %v: want both hosts, read-write", s.DSN(), s.Endpoints())
	}
	ctx := longCtx(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		retry(ctx, t, sql, func() error {
			conn, err := pgx.Connect(ctx, s.DSN())
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			_, err = conn.Exec(ctx, sql, args...)
			return err
		})
	}
	count := func() (n int) {
		t.Helper()
		retry(ctx, t, "count", func() error {
			conn, err := pgx.Connect(ctx, s.DSN())
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			return conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
		})
		return n
	}
	exec("CREATE TABLE t (i int)")
	primary := s.Primary(t)
	for i, how := range []testenv.Failover{testenv.Crash, testenv.Handover, testenv.Crash} {
		exec("INSERT INTO t VALUES ($1)", i)
		next := s.Failover(t, how)
		if next == primary {
			t.Fatalf("%v failover %d: the primary is still %s", how, i, next)
		}
		primary = next
		if n := count(); n != i+1 {
			t.Fatalf("after %v failover %d: %d rows, want %d", how, i, n, i+1)
		}
	}
}
