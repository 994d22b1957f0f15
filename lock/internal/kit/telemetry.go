package kit

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the OpenTelemetry instrumentation scope of every leasehold
// meter and tracer: backendkit.ScopeName (lock's TestRenewalOutcomesAndAcquireSpan
// checks that they agree).
const ScopeName = "github.com/leasehold-go/leasehold"

// Telemetry holds the instruments of the lock layer (their names are
// listed on backendkit.Telemetry).
type Telemetry struct {
	Tracer trace.Tracer
	Meter  metric.Meter

	// tracing: whether Tracer's spans are recorded (see Tracing).
	tracing tracing

	attempt  metric.Float64Histogram
	releases metric.Int64Counter
	wait     metric.Float64Histogram
	renewals metric.Int64Counter
	losses   metric.Int64Counter
	active   metric.Int64UpDownCounter

	waitOutcome  outcomeSet
	renewOutcome addSet
	lossReason   addSet

	mu       sync.Mutex
	backends map[string]*Backend
}

var (
	defaultOnce      sync.Once
	defaultTelemetry *Telemetry
)

// TelemetryFor returns the instruments for the providers; nil means the
// global provider. The instruments of the global providers are built once
// and shared (they forward to whatever SDK the application installs, before
// or after); others are built anew, but that those of the last providers
// asked for are shared, and a component builds its own once.
func TelemetryFor(mp metric.MeterProvider, tp trace.TracerProvider) *Telemetry {
	if mp == nil && tp == nil {
		defaultOnce.Do(func() { defaultTelemetry = newTelemetry(otel.GetMeterProvider(), otel.GetTracerProvider()) })
		return defaultTelemetry
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	// The instruments of the last providers asked for are shared too, when
	// both are of comparable types: the components a scheduler makes for
	// its 10,000 timers (a semaphore each) pass the providers they were
	// given, and built 10,000 sets of instruments, 4 KB each.
	comparable := isComparable(mp) && isComparable(tp)
	if last := lastTelemetry.Load(); comparable && last != nil && last.mp == mp && last.tp == tp {
		return last.t
	}
	t := newTelemetry(mp, tp)
	if comparable {
		lastTelemetry.Store(&providersTelemetry{mp, tp, t})
	}
	return t
}

// lastTelemetry is the Telemetry TelemetryFor built last, with its
// providers.
var lastTelemetry atomic.Pointer[providersTelemetry]

type providersTelemetry struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
	t  *Telemetry
}

// isComparable reports whether v can be compared with == without a
// panic: its value, not only its type (a struct of a comparable type can
// hold an interface whose value is a slice).
func isComparable(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.IsValid() && rv.Comparable()
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) *Telemetry {
	m := mp.Meter(ScopeName)
	t := &Telemetry{Tracer: tp.Tracer(ScopeName), Meter: m, backends: map[string]*Backend{}}
	switch {
	case isNoop(tp):
		t.tracing = never
	case isDefaultGlobal(tp):
		t.tracing = onceInstalled
	}
	// Instrument creation only fails on an invalid name; ours are constant
	// and valid, and the API returns usable no-op instruments regardless.
	t.attempt, _ = m.Float64Histogram("leasehold.lock.attempt.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one acquire attempt at the backend."))
	t.releases, _ = m.Int64Counter("leasehold.lock.releases",
		metric.WithDescription("Releases at the backend, by outcome."))
	t.wait, _ = m.Float64Histogram("leasehold.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a blocking Acquire waited, by outcome."))
	t.renewals, _ = m.Int64Counter("leasehold.lock.renewals",
		metric.WithDescription("Lease renewals, by outcome."))
	t.losses, _ = m.Int64Counter("leasehold.lock.losses",
		metric.WithDescription("Leases lost while held, by reason."))
	t.active, _ = m.Int64UpDownCounter("leasehold.lock.leases.active",
		metric.WithDescription("Leases currently held under Keep."))
	t.waitOutcome = newOutcomeSet("leasehold.outcome", nil, "acquired", "cancelled", "error")
	t.renewOutcome = newOutcomeSet("leasehold.outcome", nil, "renewed", "lost", "refused", "unknown").adds()
	t.lossReason = newOutcomeSet("leasehold.reason", nil, "renewal", "deadline", "backend").adds()
	return t
}

// tracing is when a Telemetry's spans are recorded.
type tracing int

const (
	always        tracing = iota // a provider of the application's
	never                        // the no-op provider (trace/noop)
	onceInstalled                // the global default: once an SDK is installed
)

// Tracing reports whether a span made with t.Tracer may be recorded, so
// that a hot path makes none for nothing: never with the no-op provider,
// and with the global provider only once the application has installed
// one of its own (otel.SetTracerProvider; until then the global provider
// makes non-recording spans, which cost about 250 bytes each).
func (t *Telemetry) Tracing() bool {
	switch t.tracing {
	case never:
		return false
	case onceInstalled:
		return !isDefaultGlobal(otel.GetTracerProvider())
	}
	return true
}

func isNoop(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		return true
	}
	return false
}

// lastProvider is the last provider isDefaultGlobal was asked about, with
// its answer.
var lastProvider atomic.Pointer[providerKind]

type providerKind struct {
	tp  trace.TracerProvider
	def bool
}

// isDefaultGlobal reports whether tp is OpenTelemetry's default global
// provider (a type internal to it), which otel.GetTracerProvider returns
// until the application sets its own. The answer for the last provider asked about is kept, so that
// Tracing costs an atomic load and a comparison.
func isDefaultGlobal(tp trace.TracerProvider) bool {
	rt := reflect.TypeOf(tp)
	if rt == nil {
		return false
	}
	comparable := isComparable(tp)
	if comparable {
		if k := lastProvider.Load(); k != nil && k.tp == tp {
			return k.def
		}
	}
	def := rt.Kind() == reflect.Pointer && rt.Elem().Name() == "tracerProvider" &&
		rt.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
	if comparable {
		lastProvider.Store(&providerKind{tp, def})
	}
	return def
}

// Wait records how long a blocking Acquire waited and how it ended
// (acquired, cancelled, error).
func (t *Telemetry) Wait(ctx context.Context, start time.Time, outcome string) {
	if t.wait.Enabled(ctx) {
		t.wait.Record(ctx, time.Since(start).Seconds(), t.waitOutcome[outcome]...)
	}
}

// Renewal counts one of Keep's Extend calls by outcome (renewed, lost,
// refused, unknown).
func (t *Telemetry) Renewal(outcome string) {
	if ctx := context.Background(); t.renewals.Enabled(ctx) {
		t.renewals.Add(ctx, 1, t.renewOutcome[outcome]...)
	}
}

// Loss counts a lease lost, by reason (renewal, deadline, backend).
func (t *Telemetry) Loss(reason string) {
	t.losses.Add(context.Background(), 1, t.lossReason[reason]...)
}

// Active adds delta to the leases held under Keep.
func (t *Telemetry) Active(delta int64) {
	if ctx := context.Background(); t.active.Enabled(ctx) {
		t.active.Add(ctx, delta)
	}
}

// outcomeSet precomputes one attribute option per outcome so that recording
// on a hot path allocates nothing.
type outcomeSet map[string][]metric.RecordOption

func newOutcomeSet(attr string, base []attribute.KeyValue, outcomes ...string) outcomeSet {
	s := outcomeSet{}
	for _, o := range outcomes {
		kv := append(append([]attribute.KeyValue(nil), base...), attribute.String(attr, o))
		s[o] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	}
	return s
}

// addSet is an outcomeSet for counters.
type addSet map[string][]metric.AddOption

// adds is s for counters, built once.
func (s outcomeSet) adds() addSet {
	a := addSet{}
	for o, r := range s {
		a[o] = []metric.AddOption{r[0].(metric.AddOption)}
	}
	return a
}

// Backend records one backend's own operations.
type Backend struct {
	t        *Telemetry
	attempt  outcomeSet
	releases addSet
}

// Backend returns the recorder for the backend called name.
func (t *Telemetry) Backend(name string) *Backend {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.backends[name]; ok {
		return b
	}
	base := []attribute.KeyValue{attribute.String("leasehold.backend", name)}
	b := &Backend{
		t:        t,
		attempt:  newOutcomeSet("leasehold.outcome", base, "acquired", "busy", "error"),
		releases: newOutcomeSet("leasehold.outcome", base, "released", "lost", "error").adds(),
	}
	t.backends[name] = b
	return b
}

// Attempt records one acquire attempt that started at start, by outcome
// (acquired, busy, error).
//
// Like every recording here, it does nothing, not even read the clock,
// when the instrument is not enabled (no meter provider): a scheduler
// makes tens of thousands of attempts a second.
func (b *Backend) Attempt(ctx context.Context, start time.Time, outcome string) {
	if b.t.attempt.Enabled(ctx) {
		b.t.attempt.Record(ctx, time.Since(start).Seconds(), b.attempt[outcome]...)
	}
}

// AttemptEnabled says whether Attempt records anything.
func (b *Backend) AttemptEnabled(ctx context.Context) bool { return b.t.attempt.Enabled(ctx) }

// ReleaseEnabled says whether Release records anything.
func (b *Backend) ReleaseEnabled(ctx context.Context) bool { return b.t.releases.Enabled(ctx) }

// Release records one Release by outcome (released, lost, error).
func (b *Backend) Release(ctx context.Context, outcome string) {
	if b.t.releases.Enabled(ctx) {
		b.t.releases.Add(ctx, 1, b.releases[outcome]...)
	}
}
