package lock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// points collects every data point by metric name and outcome/reason.
func points(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	label := func(set attribute.Set) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.AsString())
		}
		return strings.Join(parts, ",")
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+"{"+label(p.Attributes)+"}"] += int64(p.Count)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+"{"+label(p.Attributes)+"}"] += p.Value
				}
			}
		}
	}
	return out
}

func TestMetricsAndLogs(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	opts := []lock.Option{lock.WithMeterProvider(mp), lock.WithLogger(logger)}

	l := memlock.New(opts...)
	ctx := context.Background()
	h, err := lock.Acquire(ctx, l, "k", time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k", time.Second); err == nil {
		t.Fatal("second grant")
	}
	lease, _ := lock.Keep(ctx, h, time.Second, append(opts, lock.WithRenewInterval(time.Hour))...)
	<-lease.Context().Done() // lost at its deadline
	_ = lease.Release(ctx)

	got := points(t, reader)
	for _, want := range []string{
		"leasehold.lock.attempt.duration{leasehold.backend=memlock,leasehold.outcome=acquired}",
		"leasehold.lock.attempt.duration{leasehold.backend=memlock,leasehold.outcome=busy}",
		"leasehold.lock.wait.duration{leasehold.outcome=acquired}",
		"leasehold.lock.losses{leasehold.reason=deadline}",
		"leasehold.lock.releases{leasehold.backend=memlock,leasehold.outcome=lost}",
	} {
		if got[want] != 1 {
			t.Errorf("%s = %d, want 1; all: %v", want, got[want], got)
		}
	}
	if got["leasehold.lock.leases.active{}"] != 0 {
		t.Errorf("active leases %d after release", got["leasehold.lock.leases.active{}"])
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"leasehold: lease lost\" key=k") {
		t.Errorf("no lease-lost warning in the log:\n%s", logs.String())
	}
}
