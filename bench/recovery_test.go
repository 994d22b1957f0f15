package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
)

// recoveryOptions tune jobs.Runner from its defaults (lease 15 s,
// heartbeat 4 s, scan 5 s: recovery in about 20 s) to seconds.
func recoveryOptions(ns string) []jobs.Option {
	return []jobs.Option{jobs.WithElection(ns), jobs.WithTTL(2 * time.Second),
		jobs.WithHeartbeatInterval(500 * time.Millisecond), jobs.WithScanInterval(500 * time.Millisecond), jobs.WithRetryBackoff(0, 0)}
}

// openRegistry opens the registry of the backend that backends.FromEnv
// names (LEASEHOLD_TEST_BACKEND), on the server the environment names.
func openRegistry(ctx context.Context, ns string) (jobs.Registry, error) {
	switch kind := os.Getenv(backends.EnvName); kind {
	case "redis":
		return redisjobs.New(redis.NewClient(&redis.Options{Addr: os.Getenv("LEASEHOLD_REDIS_ADDR")}), ns)
	case "postgres":
		pool, err := pgxpool.New(ctx, os.Getenv("LEASEHOLD_PG_DSN"))
		if err != nil {
			return nil, err
		}
		r, err := pgjobs.New(pool, ns)
		if err != nil {
			return nil, err
		}
		return r, r.Setup(ctx)
	default:
		return nil, fmt.Errorf("no job registry for %q", kind)
	}
}

// workerMain is the child side of BenchmarkRecovery: a worker that tracks
// job BENCH_JOB, heartbeats it, prints "TRACKED", and runs until killed.
func workerMain() {
	childproc.Main("BENCH_WORKER", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ns := os.Getenv("BENCH_WORKER")
		reg, err := openRegistry(ctx, ns)
		if err != nil {
			return err
		}
		l, err := backends.FromEnv()
		if err != nil {
			return err
		}
		r, err := jobs.NewRunner(reg, l, func(context.Context, jobs.Job, time.Duration) error { return nil }, recoveryOptions(ns)...)
		if err != nil {
			return err
		}
		go func() { _ = r.Run(ctx) }()
		if _, _, err := r.Track(ctx, jobs.Job{ID: os.Getenv("BENCH_JOB")}); err != nil {
			return err
		}
		fmt.Println("TRACKED")
		<-ctx.Done()
		return nil
	})
}

// BenchmarkRecovery: a worker process with a job in flight is SIGKILLed;
// a recovering jobs.Runner (this process, the leader of its election)
// requeues the job. Reports the time from the kill to the requeue, p50 and
// max in ms, with lease 2 s, heartbeat 0.5 s, scan 0.5 s. None of the peer
// libraries tracks jobs in flight, so leasehold runs alone. Run with a
// fixed count (-benchtime 5x); ns/op is a round, process start included.
func BenchmarkRecovery(b *testing.B) {
	for _, kind := range []func(testing.TB) backends.Backend{backends.Redis, backends.Postgres} {
		be := kind(b)
		b.Run(be.Name+"/leasehold", func(b *testing.B) {
			for _, kv := range be.Env {
				k, v, _ := strings.Cut(kv, "=")
				b.Setenv(k, v)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ns := fmt.Sprintf("bench_recovery_%d", time.Now().UnixNano()%1e9)
			reg, err := openRegistry(ctx, ns)
			if err != nil {
				b.Fatal(err)
			}
			requeued := make(chan string, 16)
			r, err := jobs.NewRunner(reg, be.New(b), func(_ context.Context, j jobs.Job, _ time.Duration) error {
				requeued <- j.ID
				return nil
			}, recoveryOptions(ns)...)
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = r.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			var lat []time.Duration
			n := 0
			for b.Loop() {
				n++
				id := fmt.Sprint("job-", n)
				w := childproc.Start(b, "BENCH_WORKER="+ns, "BENCH_JOB="+id)
				w.Expect(b, "TRACKED", 30*time.Second)
				w.Signal(b, syscall.SIGKILL)
				killed := time.Now()
				select {
				case got := <-requeued:
					if got != id {
						b.Fatalf("requeued %s, want %s", got, id)
					}
				case <-time.After(30 * time.Second):
					b.Fatalf("%s not requeued within 30 s of the kill", id)
				}
				lat = append(lat, time.Since(killed))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
			b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
		})
	}
}
