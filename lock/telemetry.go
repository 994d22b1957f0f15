package lock

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the OpenTelemetry instrumentation scope of every leasehold
// meter and tracer.
const ScopeName = "github.com/leasehold-go/leasehold"

// Telemetry holds the OpenTelemetry instruments of the lock layer. It is
// built once per (meter provider, tracer provider) pair and shared; every
// package of leasehold records through it, so the names below are the
// whole lock vocabulary:
//
//	leasehold.lock.attempt.duration  histogram, s   one TryAcquire at the backend; outcome=acquired|busy|error
//	leasehold.lock.releases          counter        Release at the backend; outcome=released|lost|error
//	leasehold.lock.wait.duration     histogram, s   Acquire, blocking; outcome=acquired|cancelled|error
//	leasehold.lock.renewals          counter        Keep's Extend calls; outcome=renewed|lost|refused|unknown
//	leasehold.lock.losses            counter        leases lost; reason=renewal|deadline|backend
//	leasehold.lock.leases.active     up-down counter leases held under Keep
//
// Backend metrics carry leasehold.backend (memlock, redislock, ...).
type Telemetry struct {
	// Tracer makes the spans of the lock layer under ScopeName: one per
	// blocking Acquire, named leasehold.lock.Acquire.
	Tracer trace.Tracer
	// Meter made the instruments above, under ScopeName; packages built
	// on lock (semaphore, leader, timers, jobs) make their own from it.
	Meter metric.Meter

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
	backends map[string]*BackendMetrics
}

type telemetryKey struct{ mp, tp any }

var telemetryCache sync.Map // telemetryKey -> *Telemetry

// Telemetry returns the instruments for c's providers, creating them on
// first use. With the default global providers they are no-ops until an
// application installs an SDK (and then they forward to it).
func (c *Config) Telemetry() *Telemetry {
	comparable := reflect.TypeOf(c.MeterProvider).Comparable() && reflect.TypeOf(c.TracerProvider).Comparable()
	key := telemetryKey{c.MeterProvider, c.TracerProvider}
	if comparable {
		if t, ok := telemetryCache.Load(key); ok {
			return t.(*Telemetry)
		}
	}
	t := newTelemetry(c.MeterProvider, c.TracerProvider)
	if comparable {
		actual, _ := telemetryCache.LoadOrStore(key, t)
		t = actual.(*Telemetry)
	}
	return t
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) *Telemetry {
	m := mp.Meter(ScopeName)
	t := &Telemetry{Tracer: tp.Tracer(ScopeName), Meter: m, backends: map[string]*BackendMetrics{}}
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

// BackendMetrics records a backend's own operations.
type BackendMetrics struct {
	t        *Telemetry
	attempt  outcomeSet
	releases map[string][]metric.AddOption
}

// Backend returns the recorder for the backend called name.
func (t *Telemetry) Backend(name string) *BackendMetrics {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.backends[name]; ok {
		return b
	}
	base := []attribute.KeyValue{attribute.String("leasehold.backend", name)}
	rel := newOutcomeSet("leasehold.outcome", base, "released", "lost", "error")
	b := &BackendMetrics{
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

// Attempt records one acquire attempt that started at start and ended with err.
func (b *BackendMetrics) Attempt(ctx context.Context, start time.Time, err error) {
	o := "acquired"
	switch {
	case err == nil:
	case errors.Is(err, ErrNotAcquired):
		o = "busy"
	default:
		o = "error"
	}
	b.t.attempt.Record(ctx, time.Since(start).Seconds(), b.attempt[o]...)
}

// Release records the outcome of one Release.
func (b *BackendMetrics) Release(ctx context.Context, err error) {
	o := "released"
	switch {
	case err == nil:
	case errors.Is(err, ErrLost):
		o = "lost"
	default:
		o = "error"
	}
	b.t.releases.Add(ctx, 1, b.releases[o]...)
}
