package kit

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
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

	attempt  metric.Float64Histogram
	releases metric.Int64Counter
	wait     metric.Float64Histogram
	renewals metric.Int64Counter
	losses   metric.Int64Counter
	active   metric.Int64UpDownCounter

	waitOutcome  outcomeSet
	renewOutcome outcomeSet
	lossReason   outcomeSet

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
// or after); others are built anew, and a component builds its own once.
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
	return newTelemetry(mp, tp)
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) *Telemetry {
	m := mp.Meter(ScopeName)
	t := &Telemetry{Tracer: tp.Tracer(ScopeName), Meter: m, backends: map[string]*Backend{}}
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
	t.renewOutcome = newOutcomeSet("leasehold.outcome", nil, "renewed", "lost", "refused", "unknown")
	t.lossReason = newOutcomeSet("leasehold.reason", nil, "renewal", "deadline", "backend")
	return t
}

// Wait records how long a blocking Acquire waited and how it ended
// (acquired, cancelled, error).
func (t *Telemetry) Wait(ctx context.Context, start time.Time, outcome string) {
	t.wait.Record(ctx, time.Since(start).Seconds(), t.waitOutcome[outcome]...)
}

// Renewal counts one of Keep's Extend calls by outcome (renewed, lost,
// refused, unknown).
func (t *Telemetry) Renewal(outcome string) {
	t.renewals.Add(context.Background(), 1, t.renewOutcome.add(outcome)...)
}

// Loss counts a lease lost, by reason (renewal, deadline, backend).
func (t *Telemetry) Loss(reason string) {
	t.losses.Add(context.Background(), 1, t.lossReason.add(reason)...)
}

// Active adds delta to the leases held under Keep.
func (t *Telemetry) Active(delta int64) { t.active.Add(context.Background(), delta) }

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

func (s outcomeSet) add(o string) []metric.AddOption {
	r := s[o]
	return []metric.AddOption{r[0].(metric.AddOption)}
}

// Backend records one backend's own operations.
type Backend struct {
	t        *Telemetry
	attempt  outcomeSet
	releases map[string][]metric.AddOption
}

// Backend returns the recorder for the backend called name.
func (t *Telemetry) Backend(name string) *Backend {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.backends[name]; ok {
		return b
	}
	base := []attribute.KeyValue{attribute.String("leasehold.backend", name)}
	rel := newOutcomeSet("leasehold.outcome", base, "released", "lost", "error")
	b := &Backend{
		t:        t,
		attempt:  newOutcomeSet("leasehold.outcome", base, "acquired", "busy", "error"),
		releases: map[string][]metric.AddOption{},
	}
	for o := range rel {
		b.releases[o] = rel.add(o)
	}
	t.backends[name] = b
	return b
}

// Attempt records one acquire attempt that started at start, by outcome
// (acquired, busy, error).
func (b *Backend) Attempt(ctx context.Context, start time.Time, outcome string) {
	b.t.attempt.Record(ctx, time.Since(start).Seconds(), b.attempt[outcome]...)
}

// Release records one Release by outcome (released, lost, error).
func (b *Backend) Release(ctx context.Context, outcome string) {
	b.t.releases.Add(ctx, 1, b.releases[outcome]...)
}
