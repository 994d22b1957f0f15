// Package telemetrytest reads what leasehold recorded into an OpenTelemetry
// SDK, for tests of its metrics.
package telemetrytest

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Points collects r and returns every data point as
// name{key=value,...} -> value: the count of a histogram, the value of a sum.
// Attributes are in the SDK's order (sorted by key).
func Points(t testing.TB, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	label := func(set attribute.Set) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
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

// NewMeterProvider returns a MeterProvider whose metrics Points reads from
// the returned reader.
func NewMeterProvider() (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	r := sdkmetric.NewManualReader()
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), r
}

// Expect reports every point of want whose value in got differs.
func Expect(t testing.TB, got, want map[string]int64) {
	t.Helper()
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s = %d, want %d; all: %v", name, got[name], n, got)
		}
	}
}
