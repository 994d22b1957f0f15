package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	gocronredis "github.com/go-co-op/gocron-redis-lock/v2"
	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/timers"
)

// jobWork is how long the every-second job runs: a short job, the case
// where a lock held only while the job runs lets a late scheduler in.
const jobWork = 10 * time.Millisecond

// startScheduler starts one scheduler running job (named name) every
// second, and returns its stop.
type startScheduler func(b *testing.B, name string, job func()) (stop func())

// BenchmarkOncePerTick: three schedulers, each with its own client,
// started 1/3 s apart, run an every-second job of 10 ms for 20 ticks (3
// under -short). Each one-second window after the last start should see
// exactly one run: reports dup-runs (runs beyond the first in a window,
// summed) and missed (windows with none) over ticks. Run with -benchtime
// 1x.
//
//	leasehold        timers.Every: a never-released claim per tick
//	gocron-startat   gocron v2, DurationJob(1s) with WithStartAt on the next
//	                 whole second (what its Locker doc recommends) and the
//	                 Redis locker with WithTries(1) (its README)
//	gocron           the same without WithStartAt: each scheduler's ticks
//	                 follow its own start
func BenchmarkOncePerTick(b *testing.B) {
	ticks := workload(20, 3)
	addr := testenv.Redis(b).Addr()
	leasehold := backends.Redis(b)
	schedulers := []struct {
		name  string
		start startScheduler
	}{
		{"leasehold", func(b *testing.B, name string, job func()) func() {
			s := testkit.Must(timers.New(leasehold.New(b)))
			if err := s.Add(timers.Every(name, time.Second, func(context.Context) error { job(); return nil })); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = s.Run(ctx); close(done) }()
			return func() { cancel(); <-done }
		}},
		{"gocron-startat", gocronScheduler(addr, true)},
		{"gocron", gocronScheduler(addr, false)},
	}
	for _, sc := range schedulers {
		b.Run("redis/"+sc.name, func(b *testing.B) {
			var dups, missed int
			for b.Loop() {
				var mu sync.Mutex
				var runs []time.Time
				job := func() {
					mu.Lock()
					runs = append(runs, time.Now())
					mu.Unlock()
					time.Sleep(jobWork) // the job's work
				}
				name := uniqueKey("bench-tick")
				start := time.Now()
				for i := range 3 {
					if i > 0 {
						<-time.After(time.Until(start.Add(time.Duration(i) * time.Second / 3)))
					}
					defer sc.start(b, name, job)()
				}
				// The windows [k s, k+1 s) after the last scheduler started.
				first := time.Now().Truncate(time.Second).Add(time.Second)
				<-time.After(time.Until(first.Add(time.Duration(ticks)*time.Second + 500*time.Millisecond)))
				mu.Lock()
				dups, missed = countTicks(runs, first, ticks)
				mu.Unlock()
			}
			b.ReportMetric(float64(dups), "dup-runs")
			b.ReportMetric(float64(missed), "missed")
			b.ReportMetric(float64(ticks), "ticks")
		})
	}
}

// countTicks sorts runs into the one-second windows from first and counts
// the runs beyond one per window and the windows with none.
func countTicks(runs []time.Time, first time.Time, ticks int) (dups, missed int) {
	per := make([]int, ticks)
	for _, r := range runs {
		if k := int(r.Sub(first) / time.Second); r.After(first) && k < ticks {
			per[k]++
		}
	}
	for _, n := range per {
		if n == 0 {
			missed++
		}
		dups += max(n-1, 0)
	}
	return dups, missed
}

func gocronScheduler(addr string, startAt bool) startScheduler {
	return func(b *testing.B, name string, job func()) func() {
		locker, err := gocronredis.NewRedisLocker(newRedis(b, addr), gocronredis.WithTries(1))
		if err != nil {
			b.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			b.Fatal(err)
		}
		opts := []gocron.JobOption{gocron.WithName(name)}
		if startAt {
			opts = append(opts, gocron.WithStartAt(gocron.WithStartDateTime(time.Now().Truncate(time.Second).Add(time.Second))))
		}
		if _, err := s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(job), opts...); err != nil {
			b.Fatal(err)
		}
		s.Start()
		return func() { _ = s.Shutdown() }
	}
}
