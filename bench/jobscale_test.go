package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Scale of BenchmarkJobsScale: BENCH_JOBS_TRACKED jobs tracked (default
// 10,000,000; 100,000 under -short) of which jobsExpired have expired, and
// a heartbeat of jobsInFlight of the others.
const (
	jobsExpired  = 100
	jobsInFlight = 100_000
)

func jobsTracked(b *testing.B) int {
	if s := os.Getenv("BENCH_JOBS_TRACKED"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < jobsExpired+1 {
			b.Fatalf("BENCH_JOBS_TRACKED=%q: want a number above %d", s, jobsExpired)
		}
		return n
	}
	return workload(10_000_000, 100_000)
}

// fillJobs writes jobs first..last in redisjobs' layout (server-side, for
// speed: Track would take an hour for ten million): job-<i> of epoch i, the
// first jobsExpired expired a second ago, the others due in an hour.
var fillJobs = redis.NewScript(`
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local z = {}
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local id = 'job-' .. i
  local deadline = ms + 3600000
  if i <= tonumber(ARGV[3]) then deadline = ms - 1000 end
  redis.call('HSET', ARGV[4] .. 'job:' .. id, 'payload', 'payload-' .. i, 'owner', 'worker-1', 'attempt', 0,
    'epoch', i, 'deadline', deadline, 'history', '', 'maxretries', 0)
  z[#z + 1] = deadline
  z[#z + 1] = id
  if #z >= 1000 then redis.call('ZADD', ARGV[4] .. 'deadlines', unpack(z)); z = {} end
end
if #z > 0 then redis.call('ZADD', ARGV[4] .. 'deadlines', unpack(z)) end
redis.call('SET', ARGV[4] .. 'epoch', ARGV[2])
return 1`)

// inFlight are the refs of the heartbeat: jobs past the expired ones.
func inFlight(tracked int) []jobs.Ref {
	refs := make([]jobs.Ref, min(jobsInFlight, tracked-jobsExpired))
	for i := range refs {
		n := jobsExpired + 1 + i
		refs[i] = jobs.Ref{ID: fmt.Sprint("job-", n), Epoch: uint64(n)}
	}
	return refs
}

// BenchmarkJobsScale: a registry of BENCH_JOBS_TRACKED jobs (10,000,000 by
// default) of which 100 expired, on a server of its own. scan is the
// recovery scan (Registry.Expired, which must find the 100); heartbeat is
// one Registry.Heartbeat of 100,000 in-flight jobs (none lost). On
// PostgreSQL, whose heartbeats go through lease rows (jobs/pgjobs),
// heartbeat is the steady one, which extends the leases whole;
// heartbeat-solo is the first of jobs in no lease (the tables of earlier
// versions), which moves every job into a lease; heartbeat-adopt is the
// first by a registry that did not track the jobs (another's), which
// adopts the other's leases whole; scan-leased is the scan once they
// are in leases, scan-expired-leases once two leases of 50 have ended
// too; heartbeat-after-track is the first heartbeat of 100,000 jobs a
// registry has just tracked (Track put them into leases). Each
// reports, beside its time (ns/op), the longest single server call of the
// registry made while it ran, and a typical one (max-call-µs and
// typical-call-µs: on Redis the longest and the median script in SLOWLOG,
// which keeps the calls of 50 µs or more; on PostgreSQL
// pg_stat_statements' max_exec_time and mean) and the p50 and p99 of a
// latency probe (PING on Redis, SELECT 1 on PostgreSQL, every millisecond
// from a client of its own: probe-p99-µs). The Redis scan also reports
// the server's memory per tracked job (INFO memory, used_memory before
// and after the load: B/job). With BENCH_PG_TOP set (and -v), each
// PostgreSQL sub-benchmark logs the registry's six costliest statements
// (calls, total, mean and longest time). Loading ten million jobs takes minutes; it
// is a server-side loop (pipelined scripts, INSERT … generate_series),
// not Track.
//
//	go -C bench test -run '^$' -bench '^BenchmarkJobsScale$' -benchtime 5x -timeout 60m
//	BENCH_JOBS_TRACKED=1000000 go -C bench test -run '^$' -bench '^BenchmarkJobsScale$' -benchtime 5x
func BenchmarkJobsScale(b *testing.B) {
	tracked := jobsTracked(b)
	b.Run("redis", func(b *testing.B) { jobsScaleRedis(b, tracked) })
	b.Run("postgres", func(b *testing.B) { jobsScalePostgres(b, tracked) })
}

func jobsScaleRedis(b *testing.B, tracked int) {
	ctx := context.Background()
	srv := testenv.NewRedis(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	usedMemory := func() int64 {
		info, err := c.InfoMap(ctx, "memory").Result()
		if err != nil {
			b.Fatal(err)
		}
		n, _ := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
		return n
	}
	if err := fillJobs.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	before := usedMemory()
	const perScript, perPipeline = 10_000, 10
	for lo := 1; lo <= tracked; {
		pipe := c.Pipeline()
		for range perPipeline {
			if lo > tracked {
				break
			}
			hi := min(lo+perScript-1, tracked)
			fillJobs.EvalSha(ctx, pipe, []string{"{scale}:deadlines"}, lo, hi, jobsExpired, "{scale}:")
			lo = hi + 1
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	perJob := float64(usedMemory()-before) / float64(tracked)
	reg, err := redisjobs.New(c, "scale")
	if err != nil {
		b.Fatal(err)
	}
	// Every command from here on that takes 50 µs or more is in the slow
	// log, with its duration (the commands a script runs too, in Redis 7:
	// a threshold of 0 would fill the log with them).
	for _, kv := range [][2]string{{"slowlog-log-slower-than", "50"}, {"slowlog-max-len", "100000"}} {
		if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	// The registry's calls are its scripts (EVALSHA): the longest, and the
	// median of those the slow log kept (50 µs or more).
	calls := func() (longest, median time.Duration) {
		entries, err := c.SlowLogGet(ctx, -1).Result()
		if err != nil {
			b.Fatal(err)
		}
		var ds []time.Duration
		for _, e := range entries {
			if len(e.Args) > 0 && strings.EqualFold(e.Args[0], "evalsha") {
				ds = append(ds, e.Duration)
			}
		}
		if len(ds) == 0 {
			return 0, 0
		}
		slices.Sort(ds)
		return ds[len(ds)-1], ds[len(ds)/2]
	}
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})
	defer probe.Close()
	ping := func(ctx context.Context) error { return probe.Ping(ctx).Err() }
	b.Run("scan", func(b *testing.B) {
		scaleRun(b, ping, func() { c.SlowLogReset(ctx) }, calls, func() {
			if js, err := reg.Expired(ctx, jobs.DefaultScanBatch); err != nil || len(js) != jobsExpired {
				b.Fatalf("Expired: %d jobs, %v; want %d", len(js), err, jobsExpired)
			}
		})
		b.ReportMetric(perJob, "B/job")
	})
	refs := inFlight(tracked)
	b.Run("heartbeat", func(b *testing.B) {
		scaleRun(b, ping, func() { c.SlowLogReset(ctx) }, calls, func() {
			if lost, err := reg.Heartbeat(ctx, refs, time.Hour); err != nil || len(lost) != 0 {
				b.Fatalf("Heartbeat of %d jobs: %d lost, %v", len(refs), len(lost), err)
			}
		})
	})
	b.Run("recover", func(b *testing.B) {
		rec, err := redisjobs.New(c, "scale-recover")
		if err != nil {
			b.Fatal(err)
		}
		recoverScale(b, rec, ping, func() { c.SlowLogReset(ctx) }, calls)
	})
}

// jobsRecovered is how many expired jobs the recover sub-benchmarks'
// scans recover (jobs.MaxScanBatch).
const jobsRecovered = jobs.MaxScanBatch

// recoverScale is the recover sub-benchmark: each iteration tracks
// jobsRecovered new jobs on reg with a lease of a millisecond (8 at a time)
// and waits until they have expired, outside the timing, then times one
// Runner.Scan that recovers them all (reclaim, requeue into nothing,
// remove: in batches of jobs.RecoveryChunk, one round trip each).
func recoverScale(b *testing.B, reg jobs.Registry, ping func(context.Context) error, reset func(), calls func() (longest, typical time.Duration)) {
	ctx := context.Background()
	r, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), func(context.Context, jobs.Job, time.Duration) error { return nil },
		jobs.WithScanBatch(jobsRecovered), jobs.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		b.Fatal(err)
	}
	iter := 0
	scaleRunEach(b, ping, reset, calls, func() func() {
		iter++
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for w := range errs {
			wg.Go(func() {
				for i := w; i < jobsRecovered && errs[w] == nil; i += len(errs) {
					_, errs[w] = reg.Track(ctx, jobs.Job{ID: fmt.Sprintf("rec-%d-%d", iter, i), Payload: []byte("payload"), Owner: "worker-1"}, time.Millisecond)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatalf("Track: %v", err)
		}
		for {
			js, err := reg.Expired(ctx, jobsRecovered)
			if err != nil {
				b.Fatal(err)
			}
			if len(js) == jobsRecovered {
				break
			}
		}
		return func() {
			if n := r.Scan(ctx); n != jobsRecovered {
				b.Fatalf("Scan recovered %d of %d", n, jobsRecovered)
			}
		}
	})
}

// scaleRun times op under the latency probe: reset clears the server's
// record of its calls, calls reads the longest since and a typical one (a
// median or a mean).
func scaleRun(b *testing.B, ping func(context.Context) error, reset func(), calls func() (longest, typical time.Duration), op func()) {
	op() // warm the client: scripts and statements loaded, connections open
	reset()
	stop := startProbe(b, ping)
	for b.Loop() {
		op()
	}
	p50, p99 := stop()
	longest, typical := calls()
	reportCalls(b, longest, typical, p50, p99)
}

// reportCalls reports the longest server call, a typical one, and the
// probe's p50 and p99.
func reportCalls(b *testing.B, longest, typical, p50, p99 time.Duration) {
	b.ReportMetric(float64(longest.Microseconds()), "max-call-µs")
	b.ReportMetric(float64(typical.Microseconds()), "typical-call-µs")
	b.ReportMetric(float64(p50.Microseconds()), "probe-p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "probe-p99-µs")
}

// scaleRunEach times, each iteration, the op that setup returns, as
// scaleRun does, with setup outside the timing, the probe and the server's
// record of calls. It reports the longest call of all iterations, the mean
// of their typical calls, the median of the probe's p50s and the largest
// of its p99s.
func scaleRunEach(b *testing.B, ping func(context.Context) error, reset func(), calls func() (longest, typical time.Duration), setup func() (op func())) {
	var longest, typical time.Duration
	var p50s, p99s []time.Duration
	for b.Loop() {
		b.StopTimer()
		op := setup()
		reset()
		stop := startProbe(b, ping)
		b.StartTimer()
		op()
		b.StopTimer()
		p50, p99 := stop()
		l, t := calls()
		longest, typical = max(longest, l), typical+t
		p50s, p99s = append(p50s, p50), append(p99s, p99)
		b.StartTimer()
	}
	slices.Sort(p50s)
	reportCalls(b, longest, typical/time.Duration(len(p50s)), p50s[len(p50s)/2], slices.Max(p99s))
}

func jobsScalePostgres(b *testing.B, tracked int) {
	ctx := context.Background()
	// testenv's 32 MB of shared buffers make the server write pages out in
	// the middle of statements; 512 MB (wal_buffers follows: 16 MB) is
	// still small for a production server.
	srv := testenv.NewPostgres(b, testenv.PostgresSetting("shared_preload_libraries", "pg_stat_statements"),
		testenv.PostgresSetting("shared_buffers", "512MB"))
	pool, err := pgxpool.New(ctx, srv.DSN())
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	const table = "scale_jobs"
	reg, err := pgjobs.New(pool, table)
	if err != nil {
		b.Fatal(err)
	}
	if err := reg.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	const perStatement = 1_000_000
	for lo := 1; lo <= tracked; lo += perStatement {
		if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, payload, owner, attempt, epoch, deadline)
			SELECT convert_to('job-' || i, 'UTF8'), convert_to('payload-' || i, 'UTF8'), 'worker-1', 0, i,
				CASE WHEN i <= $3 THEN now() - interval '1 second' ELSE now() + interval '1 hour' END
			FROM generate_series($1::bigint, $2::bigint) AS i`, lo, min(lo+perStatement-1, tracked), jobsExpired); err != nil {
			b.Fatal(err)
		}
	}
	for _, q := range []string{`VACUUM ANALYZE ` + table, `SELECT setval('` + table + `_epoch', ` + strconv.Itoa(tracked) + `)`,
		`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	reset := func() {
		if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			b.Fatal(err)
		}
	}
	// The registry's statements are those that name its table: the longest
	// and the mean.
	calls := func() (longest, mean time.Duration) {
		var maxMs, meanMs float64
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(max_exec_time), 0), coalesce(sum(total_exec_time) / nullif(sum(calls), 0), 0)
			FROM pg_stat_statements WHERE query LIKE '%' || $1 || '%' AND query NOT LIKE '%pg_stat_statements%'`, table).Scan(&maxMs, &meanMs); err != nil {
			b.Fatal(err)
		}
		if os.Getenv("BENCH_PG_TOP") != "" {
			rows, _ := pool.Query(ctx, `SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3), round(max_exec_time::numeric, 3), left(regexp_replace(query, '\s+', ' ', 'g'), 90)
				FROM pg_stat_statements WHERE query LIKE '%' || $1 || '%' AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 6`, table)
			for rows.Next() {
				var n int64
				var tot, mean, mx float64
				var q string
				_ = rows.Scan(&n, &tot, &mean, &mx, &q)
				b.Logf("TOP calls %d total %.1f ms mean %.3f max %.3f: %s", n, tot, mean, mx, q)
			}
			rows.Close()
		}
		return time.Duration(maxMs * float64(time.Millisecond)), time.Duration(meanMs * float64(time.Millisecond))
	}
	// The probe's connection is opened again when the probe of the
	// sub-benchmark before stopped it mid-statement (pgx closes it then).
	var probe *pgx.Conn
	defer func() {
		if probe != nil {
			probe.Close(ctx)
		}
	}()
	ping := func(pctx context.Context) error {
		if probe == nil || probe.IsClosed() {
			var err error
			if probe, err = pgx.Connect(ctx, srv.DSN()); err != nil {
				return err
			}
		}
		_, err := probe.Exec(pctx, "SELECT 1")
		return err
	}
	b.Run("scan", func(b *testing.B) {
		scaleRun(b, ping, reset, calls, func() {
			if js, err := reg.Expired(ctx, jobs.DefaultScanBatch); err != nil || len(js) != jobsExpired {
				b.Fatalf("Expired: %d jobs, %v; want %d", len(js), err, jobsExpired)
			}
		})
	})
	refs := inFlight(tracked)
	heartbeat := func(reg *pgjobs.Registry) {
		if lost, err := reg.Heartbeat(ctx, refs, time.Hour); err != nil || len(lost) != 0 {
			b.Fatalf("Heartbeat of %d jobs: %d lost, %v", len(refs), len(lost), err)
		}
	}
	newRegistry := func() *pgjobs.Registry {
		r, err := pgjobs.New(pool, table)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		return r
	}
	ids := make([][]byte, len(refs))
	for i, ref := range refs {
		ids[i] = []byte(ref.ID)
	}
	// solo takes the in-flight jobs out of their leases (as the load left
	// them), due in an hour.
	solo := func() {
		if _, err := pool.Exec(ctx, `WITH u AS (UPDATE `+table+` SET lease = NULL, deadline = now() + interval '1 hour'
			WHERE id = ANY($1) AND lease IS NOT NULL RETURNING lease)
			DELETE FROM `+table+`_lease WHERE id IN (SELECT lease FROM u)`, ids); err != nil {
			b.Fatal(err)
		}
	}
	// heartbeat-solo: the first heartbeat of jobs in no lease (those of
	// the tables of earlier versions, or reclaimed), which moves each into
	// a lease row, by a registry of its own each time; each iteration's
	// setup, outside the timing, takes the jobs out of their leases again.
	b.Run("heartbeat-solo", func(b *testing.B) {
		scaleRunEach(b, ping, reset, calls, func() func() {
			solo()
			r := newRegistry()
			return func() { heartbeat(r) }
		})
	})
	// heartbeat-adopt: the first heartbeat of the jobs by a registry that
	// did not track them (a process that heartbeats another's jobs), which
	// locates them and adopts the leases of the registry before it whole:
	// a registry of its own each time.
	b.Run("heartbeat-adopt", func(b *testing.B) {
		heartbeat(newRegistry()) // the jobs in a registry's leases, whatever ran before
		scaleRunEach(b, ping, reset, calls, func() func() {
			r := newRegistry()
			return func() { heartbeat(r) }
		})
	})
	// heartbeat-adopted: the steady heartbeat of a registry that adopted
	// another's leases (its warm-up call adopts them): it extends them
	// whole, counting its jobs in each on the server.
	b.Run("heartbeat-adopted", func(b *testing.B) {
		r := newRegistry()
		scaleRun(b, ping, reset, calls, func() { heartbeat(r) })
	})
	// heartbeat: the steady heartbeat of a registry's own leases (its
	// warm-up call moves the jobs, taken out of the leases, into them).
	solo()
	b.Run("heartbeat", func(b *testing.B) {
		scaleRun(b, ping, reset, calls, func() { heartbeat(reg) })
	})
	// scan-leased: the recovery scan once the in-flight jobs are in leases.
	b.Run("scan-leased", func(b *testing.B) {
		scaleRun(b, ping, reset, calls, func() {
			if js, err := reg.Expired(ctx, jobs.DefaultScanBatch); err != nil || len(js) != jobsExpired {
				b.Fatalf("Expired: %d jobs, %v; want %d", len(js), err, jobsExpired)
			}
		})
	})
	// scan-expired-leases: the leases of 100 more jobs ended (the server's
	// clock moved past them): the scan finds them too, 200 in all.
	if _, err := pool.Exec(ctx, `UPDATE `+table+`_lease SET deadline = now() - interval '1 second'
		WHERE id IN (SELECT lease FROM `+table+` WHERE id = ANY($1))`, [][]byte{[]byte(refs[0].ID), []byte(refs[len(refs)-1].ID)}); err != nil {
		b.Fatal(err)
	}
	b.Run("scan-expired-leases", func(b *testing.B) {
		scaleRun(b, ping, reset, calls, func() {
			if js, err := reg.Expired(ctx, jobs.DefaultScanBatch); err != nil || len(js) != 2*jobsExpired {
				b.Fatalf("Expired: %d jobs, %v; want %d", len(js), err, 2*jobsExpired)
			}
		})
	})
	// heartbeat-after-track: the first heartbeat of jobs a registry has
	// just tracked (a worker's jobs: Track puts each into a lease), a
	// registry of its own each time. The setup of each iteration, outside
	// the timing, tracks as many new jobs as the heartbeat lists
	// (jobsInFlight; 2,000 under -short), 8 Tracks at a time.
	last := tracked // the jobs are job-1 … job-<last>
	b.Run("recover", func(b *testing.B) {
		rec, err := pgjobs.New(pool, table+"_recover")
		if err != nil {
			b.Fatal(err)
		}
		if err := rec.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		recoverScale(b, rec, ping, reset, calls)
	})
	b.Run("heartbeat-after-track", func(b *testing.B) {
		scaleRunEach(b, ping, reset, calls, func() func() {
			fresh, err := pgjobs.New(pool, table)
			if err != nil {
				b.Fatal(err)
			}
			refs := trackJobs(b, fresh, last+1, workload(jobsInFlight, 2_000))
			last += len(refs)
			return func() {
				if lost, err := fresh.Heartbeat(ctx, refs, time.Hour); err != nil || len(lost) != 0 {
					b.Fatalf("Heartbeat of %d jobs: %d lost, %v", len(refs), len(lost), err)
				}
			}
		})
	})
}

// trackJobs tracks n new jobs job-<from> … with reg, 8 at a time, for an
// hour, and returns their refs.
func trackJobs(b *testing.B, reg *pgjobs.Registry, from, n int) []jobs.Ref {
	refs := make([]jobs.Ref, n)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += len(errs) {
				id := fmt.Sprint("job-", from+i)
				var j jobs.Job
				j, errs[w] = reg.Track(context.Background(), jobs.Job{ID: id, Payload: []byte("payload-" + id[4:]), Owner: "worker-1"}, time.Hour)
				refs[i] = j.Ref()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatalf("Track: %v", err)
	}
	return refs
}
