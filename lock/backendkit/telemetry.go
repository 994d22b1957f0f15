package backendkit

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

// ScopeName is the OpenTelemetry instrumentation scope of every leasehold
// meter and tracer.
const ScopeName = "github.com/leasehold-go/leasehold"

// Telemetry holds the OpenTelemetry instruments of the lock layer, for
// the providers of one lock.Common. A component builds it once, when it is
// made (NewTelemetry); every package of leasehold records through it, so
// the names below are the whole lock vocabulary:
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
	// blocking Acquire, named leasehold.lock.Acquire, when a span can be
	// recorded (not with trace/noop's provider, nor with the global one
	// before the application installs an SDK).
	Tracer trace.Tracer
	// Meter made the instruments above, under ScopeName; packages built
	// on lock (semaphore, leader, timers, jobs) make their own from it.
	Meter metric.Meter

	t *kit.Telemetry
}

// NewTelemetry returns the instruments for c's providers (nil: the global
// ones, whose instruments are built once and shared; they are no-ops until
// an application installs an SDK, and then forward to it).
func NewTelemetry(c lock.Common) *Telemetry {
	t := kit.TelemetryFor(c.MeterProvider, c.TracerProvider)
	return &Telemetry{Tracer: t.Tracer, Meter: t.Meter, t: t}
}

var helperOption = kit.HelperOption.(func(lock.Common, *kit.Telemetry) lock.Option)

// HelperOption is the lock.Option a component made with c and t hands the
// helpers it calls (lock.Acquire, Keep, Hold, AcquireWith): it is
// lock.WithCommon(c), recording through t's instruments instead of
// building new ones on every call.
func (t *Telemetry) HelperOption(c lock.Common) lock.Option { return helperOption(c, t.t) }

// BackendMetrics records a backend's own operations.
type BackendMetrics struct{ b *kit.Backend }

// Backend returns the recorder for the backend called name.
func (t *Telemetry) Backend(name string) *BackendMetrics {
	return &BackendMetrics{t.t.Backend(name)}
}

// Attempt records one acquire attempt that started at start and ended with
// err: acquired (nil), busy (lock.ErrNotAcquired) or error.
func (b *BackendMetrics) Attempt(ctx context.Context, start time.Time, err error) {
	if !b.b.AttemptEnabled(ctx) {
		return
	}
	o := "acquired"
	switch {
	case err == nil:
	case errors.Is(err, lock.ErrNotAcquired):
		o = "busy"
	default:
		o = "error"
	}
	b.b.Attempt(ctx, start, o)
}

// Release records the outcome of one Release: released (nil), lost
// (lock.ErrLost) or error.
func (b *BackendMetrics) Release(ctx context.Context, err error) {
	if !b.b.ReleaseEnabled(ctx) {
		return
	}
	o := "released"
	switch {
	case err == nil:
	case errors.Is(err, lock.ErrLost):
		o = "lost"
	default:
		o = "error"
	}
	b.b.Release(ctx, o)
}
