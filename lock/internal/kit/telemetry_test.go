package kit

import (
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestTracing: Acquire makes its span only when it can be recorded: never
// with the no-op provider, always with an application's, and with the
// global default once an SDK is installed (this test binary installs one
// at the end: the global provider cannot be reset).
func TestTracing(t *testing.T) {
	sdk := sdktrace.NewTracerProvider()
	global := TelemetryFor(nil, nil)
	// A run before this one (-count) has installed an SDK already.
	installed := !isDefaultGlobal(otel.GetTracerProvider())
	for _, c := range []struct {
		name string
		t    *Telemetry
		want bool
	}{
		{"global", global, installed},
		{"global passed explicitly", TelemetryFor(nil, otel.GetTracerProvider()), installed},
		{"noop", TelemetryFor(nil, noop.NewTracerProvider()), false},
		{"an SDK", TelemetryFor(nil, sdk), true},
	} {
		if got := c.t.Tracing(); got != c.want {
			t.Errorf("%s (SDK installed: %v): Tracing() = %v, want %v", c.name, installed, got, c.want)
		}
	}
	otel.SetTracerProvider(sdk)
	if !global.Tracing() {
		t.Error("global after otel.SetTracerProvider: Tracing() = false, want true")
	}
}

// tagged providers are of a comparable type, but hold a value that is not.
type taggedMeterProvider struct {
	metric.MeterProvider
	tag any
}

type taggedTracerProvider struct {
	trace.TracerProvider
	tag any
}

// Providers of a comparable type that hold an uncomparable value (a
// slice in an interface field) are not compared: TelemetryFor panicked
// ("comparing uncomparable type []int") at the second call with such a
// provider, as the semaphore did.
func TestProvidersOfUncomparableValues(t *testing.T) {
	for range 2 {
		mp := taggedMeterProvider{metricnoop.NewMeterProvider(), []int{1}}
		tp := taggedTracerProvider{noop.NewTracerProvider(), []int{2}}
		if tel := TelemetryFor(mp, tp); !tel.Tracing() {
			t.Error("an application's tracer provider: Tracing() = false")
		}
	}
}
