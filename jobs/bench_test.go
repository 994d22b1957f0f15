package jobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Scan benchmarks: 1,000,000 tracked jobs of which 100 expired. "index" is
// Registry.Expired; "every-key" is the usual design that visits every job
// and checks its deadline (SCAN + HMGET on Redis, a sequential scan on
// PostgreSQL). Setting up the million jobs takes a while.

const tracked, expired = 1_000_000, 100

// fill loads the jobs with a server-side loop (it does not go through the
// registry, for speed, but writes exactly its layout).
var fillRedis = redis.NewScript(`
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local id = 'job-' .. i
  local deadline = ms + 3600000
  if i <= tonumber(ARGV[3]) then deadline = ms - 1000 end
  redis.call('HSET', ARGV[4] .. 'job:' .. id, 'payload', 'x', 'owner', 'w', 'attempt', 0, 'epoch', i, 'deadline', deadline, 'history', '')
  redis.call('ZADD', ARGV[4] .. 'deadlines', deadline, id)
end
return 1`)

func BenchmarkScan(b *testing.B) {
	ctx := context.Background()
	b.Run("redis", func(b *testing.B) {
		c := redis.NewClient(&redis.Options{Addr: testenv.NewRedis(b).Addr()})
		defer c.Close()
		reg, _ := redisjobs.New(c, "bench")
		for lo := 1; lo <= tracked; lo += 50_000 {
			if err := fillRedis.Run(ctx, c, nil, lo, lo+49_999, expired, "{bench}:").Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("index", func(b *testing.B) {
			for b.Loop() {
				if js, err := reg.Expired(ctx, 1000); err != nil || len(js) != expired {
					b.Fatal(len(js), err)
				}
			}
		})
		b.Run("every-key", func(b *testing.B) {
			for b.Loop() {
				found := 0
				now := time.Now().UnixMilli()
				iter := c.Scan(ctx, 0, "{bench}:job:*", 10_000).Iterator()
				var keys []string
				flush := func() {
					pipe := c.Pipeline()
					cmds := make([]*redis.StringCmd, len(keys))
					for i, k := range keys {
						cmds[i] = pipe.HGet(ctx, k, "deadline")
					}
					_, _ = pipe.Exec(ctx)
					for _, cmd := range cmds {
						if d, _ := strconv.ParseInt(cmd.Val(), 10, 64); d <= now {
							found++
						}
					}
					keys = keys[:0]
				}
				for iter.Next(ctx) {
					if keys = append(keys, iter.Val()); len(keys) == 10_000 {
						flush()
					}
				}
				flush()
				if found != expired {
					b.Fatal(found)
				}
			}
		})
	})
	b.Run("postgres", func(b *testing.B) {
		pool, err := pgxpool.New(ctx, testenv.Postgres(b).DSN())
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		table := fmt.Sprintf("bench_jobs_%d", time.Now().UnixNano()%1e6)
		reg, _ := pgjobs.New(pool, table)
		if err := reg.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, payload, owner, attempt, epoch, deadline)
			SELECT convert_to('job-' || i, 'UTF8'), 'x', 'w', 0, i, CASE WHEN i <= %d THEN now() - interval '1 second' ELSE now() + interval '1 hour' END
			FROM generate_series(1, %d) AS i; ANALYZE %s`, table, expired, tracked, table)); err != nil {
			b.Fatal(err)
		}
		b.Run("index", func(b *testing.B) {
			for b.Loop() {
				if js, err := reg.Expired(ctx, 1000); err != nil || len(js) != expired {
					b.Fatal(len(js), err)
				}
			}
		})
		b.Run("every-key", func(b *testing.B) {
			for b.Loop() {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off"); err != nil {
						return err
					}
					var n int
					err := tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM (SELECT id, deadline FROM %s WHERE deadline <= now()) AS e", table)).Scan(&n)
					if n != expired {
						return fmt.Errorf("%d expired", n)
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// roundTrips counts the requests a client sends: a redis.Hook (a command or
// a pipeline is one round trip), and a pgxpool's acquisitions (a query, or
// a pipeline of statements, on the connection acquired is one).
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkHeartbeat10k: one heartbeat for 10,000 in-flight jobs. It counts
// the requests the client sends (round-trips/op: on Redis a script per 100
// jobs, two at a time, so 100 of about 50 round trips of wall time; on
// PostgreSQL one pipeline, of a statement per 25 leases of 50 jobs once the
// jobs are in leases (jobs/pgjobs), one) and fails if
// there are more than one per 100 jobs. The first heartbeat, outside the count, warms
// the client (script and statement caches) as a running worker's are.
func BenchmarkHeartbeat10k(b *testing.B) {
	ctx := context.Background()
	for _, s := range []struct {
		name string
		reg  func(b *testing.B, rt *roundTrips) jobs.Registry
	}{
		{"redis", func(b *testing.B, rt *roundTrips) jobs.Registry {
			c := redis.NewClient(&redis.Options{Addr: testenv.Redis(b).Addr()})
			c.AddHook(rt)
			b.Cleanup(func() { _ = c.Close() })
			r, _ := redisjobs.New(c, fmt.Sprint("hb", time.Now().UnixNano()))
			return r
		}},
		{"postgres", func(b *testing.B, rt *roundTrips) jobs.Registry {
			cfg, err := pgxpool.ParseConfig(testenv.Postgres(b).DSN())
			if err != nil {
				b.Fatal(err)
			}
			// pgjobs pipelines a heartbeat's statements through pgconn (no
			// tracer sees them) on the connection it acquires.
			cfg.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) { rt.n.Add(1); return true, nil }
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			r, _ := pgjobs.New(pool, fmt.Sprintf("hb_%d", time.Now().UnixNano()%1e6))
			return r
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			var rt roundTrips
			reg := s.reg(b, &rt)
			refs := make([]jobs.Ref, 10_000)
			for i := range refs {
				j, err := reg.Track(ctx, jobs.Job{ID: fmt.Sprint("job-", i), Owner: "w"}, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				refs[i] = j.Ref()
			}
			heartbeat := func() {
				if lost, err := reg.Heartbeat(ctx, refs, time.Hour); err != nil || len(lost) != 0 {
					b.Fatal(len(lost), err)
				}
			}
			heartbeat()
			rt.n.Store(0)
			for b.Loop() {
				heartbeat()
			}
			perOp := float64(rt.n.Load()) / float64(b.N)
			b.ReportMetric(perOp, "round-trips/op")
			if perOp > float64(len(refs))/100 {
				b.Fatalf("%v round trips per heartbeat of %d jobs, want one per 100 jobs at most", perOp, len(refs))
			}
		})
	}
}

// BenchmarkScanRecovery is a scan that recovers 1,000 expired jobs, one
// job at a time (single: reclaim, requeue, remove, two registry calls
// each, the registry's BatchRecoverer hidden) or in batches (batched: a
// ReclaimEach and a RemoveEach per jobs.RecoveryChunk), with the
// recoveries (the Requeues, batched) one after another and 8 at once
// (WithRecoveryConcurrency), on loopback and
// through a proxy that delays the server's replies by 1 ms (a server
// about a round trip of 1 ms away). Each iteration first tracks the 1,000
// with a lease of a millisecond (straight to the server) and waits until
// the registry lists them expired, outside the timer.
func BenchmarkScanRecovery(b *testing.B) {
	ctx := context.Background()
	const n = 1000
	for _, s := range []struct {
		name string
		addr func(b *testing.B) string
		reg  func(b *testing.B, addr, ns string) jobs.Registry
	}{
		{"redis", func(b *testing.B) string { return testenv.Redis(b).Addr() }, func(b *testing.B, addr, ns string) jobs.Registry {
			c := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { _ = c.Close() })
			r, _ := redisjobs.New(c, ns)
			return r
		}},
		{"postgres", func(b *testing.B) string { return testenv.Postgres(b).Addr() }, func(b *testing.B, addr, ns string) jobs.Registry {
			pool, err := pgxpool.New(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			r, _ := pgjobs.New(pool, ns)
			return r
		}},
	} {
		for _, rtt := range []time.Duration{0, time.Millisecond} {
			for _, mode := range []struct {
				name string
				c    int
			}{{"single/concurrency-1", 1}, {"single/concurrency-8", 8}, {"batched/concurrency-1", 1}, {"batched/concurrency-8", 8}} {
				c, batched := mode.c, strings.HasPrefix(mode.name, "batched")
				b.Run(fmt.Sprintf("%s/rtt-%v/%s", s.name, rtt, mode.name), func(b *testing.B) {
					addr, ns := s.addr(b), fmt.Sprintf("rec_%d", time.Now().UnixNano()%1e9)
					setup, via := s.reg(b, addr, ns), addr
					if rtt > 0 {
						p := faultproxy.Start(b, addr)
						p.SetReplyDelay(rtt)
						via = p.Addr()
					}
					reg := s.reg(b, via, ns)
					if !batched { // hide its ReclaimEach and RemoveEach
						reg = struct{ jobs.Registry }{reg}
					}
					r, err := jobs.NewRunner(reg, testkit.Must(memlock.New()),
						func(context.Context, jobs.Job, time.Duration) error { return nil },
						jobs.WithRecoveryConcurrency(c), jobs.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}))
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					for range b.N {
						for k := range n {
							if _, err := setup.Track(ctx, jobs.Job{ID: fmt.Sprint("job-", k), Owner: "w"}, time.Millisecond); err != nil {
								b.Fatal(err)
							}
						}
						for {
							js, err := setup.Expired(ctx, 2*n)
							if err != nil {
								b.Fatal(err)
							}
							if len(js) == n {
								break
							}
						}
						b.StartTimer()
						got := r.Scan(ctx)
						b.StopTimer()
						if got != n {
							b.Fatalf("recovered %d of %d", got, n)
						}
					}
				})
			}
		}
	}
}
