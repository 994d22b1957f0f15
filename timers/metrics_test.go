package timers_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

// timerMetrics reads the leasehold.timer.* data points of timer: the
// counters' values and the histogram's counts and sums (in seconds), by
// the metric's name and its outcome or reason, as "runs/ok" or
// "run.duration/error".
func timerMetrics(t *testing.T, r *sdkmetric.ManualReader, timer string) (values map[string]int64, sums map[string]float64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	values, sums = map[string]int64{}, map[string]float64{}
	key := func(metric string, set attribute.Set) (string, bool) {
		if v, _ := set.Value("leasehold.timer"); v.AsString() != timer {
			return "", false
		}
		label, ok := set.Value("leasehold.outcome")
		if !ok {
			label, _ = set.Value("leasehold.reason")
		}
		return metric[len("leasehold.timer."):] + "/" + label.AsString(), true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if k, ok := key(m.Name, p.Attributes); ok {
						values[k] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if k, ok := key(m.Name, p.Attributes); ok {
						values[k] += int64(p.Count)
						sums[k] += p.Sum
					}
				}
			}
		}
	}
	return values, sums
}

// One timer every second, WithMaxConcurrency 1, over a backend that is away
// from 4.5 s to 5.5 s and a clock that jumps 600 ms ahead at 5.7 s:
//
//	tick 1  runs 1.5 s, ok
//	tick 2  skipped: busy (tick 1 holds the slot)
//	tick 3  fails at once: error
//	tick 4  runs 0.25 s, ok
//	tick 5  skipped: unavailable
//	tick 6  reached 600 ms late: skipped, misfire
//	tick 7  runs 0.25 s, ok
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		var skew atomic.Int64
		l := outage{Lock: testkit.Must(memlock.New()), down: epoch.Add(4500 * time.Millisecond), up: epoch.Add(5500 * time.Millisecond)}
		s := testkit.Must(timers.New(l, timers.WithCommon(lock.Common{MeterProvider: mp, Logger: slog.New(slog.DiscardHandler)}), timers.WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })))
		fn := func(ctx context.Context) error {
			tick, _ := timers.TickFrom(ctx)
			switch tick.At.Sub(epoch) {
			case time.Second:
				time.Sleep(1500 * time.Millisecond)
			case 3 * time.Second:
				return errors.New("boom")
			default:
				time.Sleep(250 * time.Millisecond)
			}
			return nil
		}
		if err := s.Add(timers.Every("metered", time.Second, fn)); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(time.Until(epoch.Add(5700 * time.Millisecond)))
			skew.Store(int64(600 * time.Millisecond))
		}()
		runFor(t, s, 7*time.Second)
		values, sums := timerMetrics(t, reader, "metered")
		want := map[string]int64{
			"runs/ok":            3,
			"runs/error":         1,
			"skips/busy":         1,
			"skips/unavailable":  1,
			"skips/misfire":      1,
			"run.duration/ok":    3,
			"run.duration/error": 1,
		}
		for k, n := range want {
			if values[k] != n {
				t.Errorf("%s = %d, want %d", k, values[k], n)
			}
		}
		if len(values) != len(want) {
			t.Errorf("data points %v, want only %v", values, want)
		}
		if sums["run.duration/ok"] != 2 || sums["run.duration/error"] != 0 {
			t.Errorf("run durations %v, want 2 s in all for the ok runs (1.5 + 0.25 + 0.25), 0 for the failed one", sums)
		}
		st := s.Status()[0]
		if st.Runs != 4 || st.Failures != 1 || st.Skips != 3 {
			t.Errorf("status %+v: want the same counts as the metrics", st)
		}
	})
}

// A run that ignores its context (issue 16: 2.5 s with WithMaxRunTime
// 300 ms and WithTTL 600 ms kept its slot, five later ticks were skipped as
// busy, and Status said "ok"): at WithMaxRunTime plus the grace (a third
// of the ttl: 1.5 s here) its slot is released, the later ticks run, and
// the run is counted as overran, in Status, the metrics and a Warn log.
func TestMaxRunTimeFreesTheSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		logs := newLogCount(1<<30, func() {})
		s := testkit.Must(timers.New(testkit.Must(memlock.New()), timers.WithCommon(lock.Common{MeterProvider: mp, Logger: slog.New(logs)})))
		fn := func(ctx context.Context) error {
			if tick, _ := timers.TickFrom(ctx); tick.At.Equal(epoch.Add(time.Second)) {
				time.Sleep(2500 * time.Millisecond) // ignores ctx
			}
			return nil
		}
		if err := s.Add(timers.Every("stuck", time.Second, fn, timers.WithMaxRunTime(300*time.Millisecond), timers.WithTTL(600*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
		// Tick 1 runs to 3.5 s and loses its slot at 1.5 s; ticks 2 and 3 run.
		runFor(t, s, 3600*time.Millisecond)
		st := s.Status()[0]
		if st.Skips != 0 || st.Runs != 3 || st.Failures != 1 {
			t.Errorf("status %+v: want 3 runs, 1 failure, no skips", st)
		}
		if !st.LastRun.Tick.Equal(epoch.Add(time.Second)) || st.LastRun.Outcome != "overran" || st.LastRun.Duration != 2500*time.Millisecond {
			t.Errorf("last run %+v: want tick 1, 2.5 s, overran", st.LastRun)
		}
		values, _ := timerMetrics(t, reader, "stuck")
		if values["runs/overran"] != 1 || values["runs/ok"] != 2 || values["skips/busy"] != 0 {
			t.Errorf("metrics %v: want runs/ok 2 and runs/overran 1, no busy skips", values)
		}
		const msg = "leasehold: timer run overran WithMaxRunTime and the grace: releasing its slot while it still runs"
		if logs.count(msg) != 1 || logs.levels[msg] != slog.LevelWarn {
			t.Errorf("logs %v: want one Warn %q", logs.n, msg)
		}
	})
}
