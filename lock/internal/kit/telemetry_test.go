package kit

import (
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestTracing: Acquire makes its span only when it can be recorded: never
// with the no-op provider, always with an application's, and with the
// global default once an SDK is installed (this test binary installs one
// at the end: the global provider cannot be reset).
func TestTracing(t *testing.T) {
	sdk := sdktrace.NewTracerProvider()
	global := TelemetryFor(nil, nil)
	for _, c := range []struct {
		name string
		t    *Telemetry
		want bool
	}{
		{"global, no SDK", global, false},
		{"global passed explicitly, no SDK", TelemetryFor(nil, otel.GetTracerProvider()), false},
		{"noop", TelemetryFor(nil, noop.NewTracerProvider()), false},
		{"an SDK", TelemetryFor(nil, sdk), true},
	} {
		if got := c.t.Tracing(); got != c.want {
			t.Errorf("%s: Tracing() = %v, want %v", c.name, got, c.want)
		}
	}
	otel.SetTracerProvider(sdk)
	if !global.Tracing() {
		t.Error("global after otel.SetTracerProvider: Tracing() = false, want true")
	}
}
