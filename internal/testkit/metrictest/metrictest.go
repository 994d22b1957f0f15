// Package metrictest reads back what an OpenTelemetry MeterProvider
// recorded, for the tests of the packages' metrics.
package metrictest

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Point is one series: Value for a counter or an up-down counter, Count
// and Sum for a histogram.
type Point struct {
	Value int64
	Count uint64
	Sum   float64
}

// New returns a MeterProvider whose measurements Collect reads.
func New() (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	r := sdkmetric.NewManualReader()
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), r
}

// Collect returns every series recorded so far, keyed by the metric's name
// and its attributes: "name{key=value,key=value}", keys in order.
func Collect(t testing.TB, r *sdkmetric.ManualReader) map[string]Point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]Point{}
	series := func(name string, set attribute.Set) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return name + "{" + strings.Join(parts, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[series(m.Name, p.Attributes)] = Point{Count: p.Count, Sum: p.Sum}
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[series(m.Name, p.Attributes)] = Point{Value: p.Value}
				}
			}
		}
	}
	return out
}

// Points is Collect with one number per series: a counter's sum, an
// up-down counter's value, a histogram's count.
func Points(t testing.TB, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for k, p := range Collect(t, r) {
		out[k] = p.Value + int64(p.Count)
	}
	return out
}

// Expect fails t for every series of want whose point in got differs.
func Expect(t testing.TB, got, want map[string]int64) {
	t.Helper()
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s = %d, want %d; all: %v", name, got[name], n, got)
		}
	}
}
