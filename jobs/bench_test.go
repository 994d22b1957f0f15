package jobs_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
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
			SELECT 'job-' || i, 'x', 'w', 0, i, CASE WHEN i <= %d THEN now() - interval '1 second' ELSE now() + interval '1 hour' END
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

// BenchmarkHeartbeat10k: one heartbeat for 10,000 in-flight jobs, one
// round trip.
func BenchmarkHeartbeat10k(b *testing.B) {
	ctx := context.Background()
	for _, s := range []struct {
		name string
		reg  func(b *testing.B) jobs.Registry
	}{
		{"redis", func(b *testing.B) jobs.Registry {
			c := redis.NewClient(&redis.Options{Addr: testenv.Redis(b).Addr()})
			b.Cleanup(func() { _ = c.Close() })
			r, _ := redisjobs.New(c, fmt.Sprint("hb", time.Now().UnixNano()))
			return r
		}},
		{"postgres", func(b *testing.B) jobs.Registry {
			pool, err := pgxpool.New(ctx, testenv.Postgres(b).DSN())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			r, _ := pgjobs.New(pool, fmt.Sprintf("hb_%d", time.Now().UnixNano()%1e6))
			return r
		}},
	} {
		b.Run(s.name, func(b *testing.B) {
			reg := s.reg(b)
			refs := make([]jobs.Ref, 10_000)
			for i := range refs {
				j, err := reg.Track(ctx, jobs.Job{ID: fmt.Sprint("job-", i), Owner: "w"}, time.Hour)
				if err != nil {
					b.Fatal(err)
				}
				refs[i] = j.Ref()
			}
			for b.Loop() {
				if lost, err := reg.Heartbeat(ctx, refs, time.Hour); err != nil || len(lost) != 0 {
					b.Fatal(len(lost), err)
				}
			}
		})
	}
}
