package jobs_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leasehold-go/leasehold/internal/testkit/metrictest"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// The leasehold.jobs.* instruments count what a Runner did: jobs tracked
// (net of the finished), heartbeats, completions by outcome, expired jobs
// found, recoveries, burials, and scan durations.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		reg := memjobs.New()
		var q queue
		r := newRunner(t, reg, testkit.Must(memlock.New()), &q, jobs.WithCommon(lock.Common{MeterProvider: mp}), jobs.WithMaxRetries(1))
		ctx, stop := context.WithCancel(t.Context())
		stopped := make(chan struct{})
		go func() { _ = r.Run(ctx); close(stopped) }()

		track := func(id string) (context.Context, func(error) error) {
			jctx, done, err := r.Track(t.Context(), jobs.Job{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			return jctx, done
		}
		_, doneOK := track("ok")
		if err := doneOK(nil); err != nil {
			t.Fatal(err)
		}
		_, doneFailed := track("failed")
		if err := doneFailed(errors.New("the job failed")); err != nil {
			t.Fatal(err)
		}
		staleCtx, doneStale := track("stale")
		_, doneLong := track("long")
		// "stale" is re-tracked elsewhere, by a worker that then crashes;
		// "poison" crashed a worker at its last retry.
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "stale", Owner: "other"}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "poison", Owner: "other", Attempt: 1}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2*jobs.DefaultScanInterval + time.Second) // heartbeats at 4 s and 8 s, scans at 5 s and 10 s
		synctest.Wait()
		if !errors.Is(context.Cause(staleCtx), jobs.ErrStale) {
			t.Fatalf("the re-tracked job's context: %v", context.Cause(staleCtx))
		}
		if err := doneStale(nil); !errors.Is(err, jobs.ErrStale) {
			t.Fatalf("done of the re-tracked job: %v", err)
		}
		if err := doneLong(nil); err != nil {
			t.Fatal(err)
		}
		stop()
		<-stopped

		got := metrictest.Points(t, reader)
		for name, want := range map[string]int64{
			"leasehold.jobs.tracked{}":                           0, // four tracked, four finished
			"leasehold.jobs.completed{leasehold.outcome=ok}":     2,
			"leasehold.jobs.completed{leasehold.outcome=failed}": 1,
			"leasehold.jobs.completed{leasehold.outcome=stale}":  1,
			"leasehold.jobs.expired{}":                           2,
			"leasehold.jobs.recovered{}":                         1,
			"leasehold.jobs.dead{}":                              1,
			"leasehold.jobs.heartbeats{leasehold.outcome=ok}":    2,
			"leasehold.jobs.heartbeats{leasehold.outcome=error}": 0,
		} {
			if got[name] != want {
				t.Errorf("%s = %d, want %d", name, got[name], want)
			}
		}
		if n := got["leasehold.jobs.scan.duration{}"]; n < 2 {
			t.Errorf("leasehold.jobs.scan.duration count = %d, want one per scan (at least 2)", n)
		}
		if _, ok := got["leasehold.jobs.tracked{}"]; !ok {
			t.Errorf("no leasehold.jobs.tracked point")
		}
		if t.Failed() {
			t.Logf("collected: %v", got)
		}
	})
}

// A job given up without done (its ctx ended) is no longer counted in
// leasehold.jobs.tracked. (It stayed counted for good: the gauge went down
// only in done.)
func TestTrackedFallsWhenAJobIsGivenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		var q queue
		r := newRunner(t, memjobs.New(), testkit.Must(memlock.New()), &q, jobs.WithCommon(lock.Common{MeterProvider: mp}))
		ctx, giveUp := context.WithCancel(t.Context())
		jctx, done, err := r.Track(ctx, jobs.Job{ID: "given-up"})
		if err != nil {
			t.Fatal(err)
		}
		giveUp()
		<-jctx.Done()
		synctest.Wait()
		if got := metrictest.Points(t, reader)["leasehold.jobs.tracked{}"]; got != 0 {
			t.Fatalf("leasehold.jobs.tracked = %d after the job was given up, want 0", got)
		}
		_ = done(nil) // a late done counts nothing twice
		if got := metrictest.Points(t, reader)["leasehold.jobs.tracked{}"]; got != 0 {
			t.Fatalf("leasehold.jobs.tracked = %d after a late done, want 0", got)
		}
	})
}
