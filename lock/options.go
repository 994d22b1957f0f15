package lock

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

// Defaults of the helpers.
const (
	DefaultTTL        = 30 * time.Second       // Do's ttl
	DefaultMinBackoff = 5 * time.Millisecond   // first retry of Acquire without a Waiter
	DefaultMaxBackoff = 500 * time.Millisecond // longest retry of Acquire without a hint

	// MinRenewInterval is Keep's shortest renewal period: a shorter one
	// (WithRenewInterval, or ttl/3 of a ttl under 3 ms) renews in a busy
	// loop against the backend, and Keep refuses it.
	MinRenewInterval = time.Millisecond
)

// Common is what every leasehold component shares: the owner identity it
// reports and where its logs, metrics and spans go. Each package takes it
// whole through its own WithCommon option and hands it on whole to the
// components it builds (timers to its semaphores, jobs to its leader), so
// nothing is dropped on the way. A zero field means its default: a fresh
// NewOwner (or the lock's own owner, for the tools built on a Lock),
// slog.Default, and the global OpenTelemetry providers.
type Common struct {
	// Owner is stored with every grant a backend makes and shown by
	// Inspector; leader, timers and jobs report it as the process's name.
	// It is 1 to MaxKeyLen bytes of UTF-8 without control characters.
	Owner string
	// Logger receives state changes (Info, Warn) and per-operation detail
	// (Debug).
	Logger *slog.Logger
	// MeterProvider and TracerProvider receive metrics and spans under the
	// instrumentation scope "github.com/leasehold-go/leasehold".
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Merge returns c with the non-zero fields of o set over it. Every
// package's WithCommon merges, so that two of them (an owner, then a
// logger) compose.
func (c Common) Merge(o Common) Common {
	if o.Owner != "" {
		c.Owner = o.Owner
	}
	if o.Logger != nil {
		c.Logger = o.Logger
	}
	if o.MeterProvider != nil {
		c.MeterProvider = o.MeterProvider
	}
	if o.TracerProvider != nil {
		c.TracerProvider = o.TracerProvider
	}
	return c
}

// Option configures a helper: Acquire, Do, Hold, Keep, HealthCheck. Every
// other package has an option type of its own.
type Option func(*options) error

// options is what Options set.
type options struct {
	common     Common
	ttl        time.Duration // Do's ttl
	renew      time.Duration // Keep's renewal period; 0: ttl/3
	margin     time.Duration // Keep gives up this long before ValidUntil
	minBackoff time.Duration // Acquire's first retry without a Waiter
	maxBackoff time.Duration // Acquire's longest wait without a hint
	tel        *kit.Telemetry
	keeper     *Keeper // Keep, Hold and Do keep through it
}

// defaults are the options of a call without any, built once: the
// helpers only read their options.
var defaults = &options{ttl: DefaultTTL, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
	tel: kit.TelemetryFor(nil, nil)}

// newOptions applies opts over the defaults. Without opts it returns the
// shared defaults, allocating nothing.
func newOptions(opts []Option) (*options, error) {
	if len(opts) == 0 {
		return defaults, nil
	}
	o := &options{ttl: DefaultTTL, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	if o.maxBackoff < o.minBackoff {
		return nil, fmt.Errorf("%w: max backoff %v is below min backoff %v", ErrInvalidArgument, o.maxBackoff, o.minBackoff)
	}
	if o.tel == nil {
		o.tel = kit.TelemetryFor(o.common.MeterProvider, o.common.TracerProvider)
	}
	return o, nil
}

// logger is the logger of common, slog.Default (as it is now) when unset.
func (o *options) logger() *slog.Logger {
	if o.common.Logger != nil {
		return o.common.Logger
	}
	return slog.Default()
}

// withTelemetry is WithCommon with the instruments built already: the
// option a component made with c hands the helpers it calls
// (backendkit.Telemetry.HelperOption), so that they are built once.
func withTelemetry(c Common, t *kit.Telemetry) Option {
	return func(o *options) error { o.common, o.tel = c, t; return nil }
}

// WithCommon sets the logger and the meter and tracer providers of a
// helper call (its Owner is not used: the backend's owner is the grant's).
func WithCommon(c Common) Option {
	return func(o *options) error { o.common = o.common.Merge(c); return nil }
}

// WithTTL sets the ttl of Do (default DefaultTTL).
func WithTTL(ttl time.Duration) Option {
	return func(o *options) error {
		if err := DefaultLimits.CheckTTL(ttl); err != nil {
			return err
		}
		o.ttl = ttl
		return nil
	}
}

// WithRenewInterval sets how often Keep renews (default ttl/3). It should
// stay well below the ttl: a renewal that fails is retried until
// ValidUntil, and the lease is lost after that.
func WithRenewInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < MinRenewInterval {
			return fmt.Errorf("%w: renew interval must be at least %v, got %v", ErrInvalidArgument, MinRenewInterval, d)
		}
		o.renew = d
		return nil
	}
}

// WithMargin makes Keep give the grant up d before ValidUntil when no
// renewal has succeeded by then (default 0: at ValidUntil), so that the
// work has d to stop before a successor can be granted the key. Leader
// election uses it to step down in time.
func WithMargin(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: margin must not be negative, got %v", ErrInvalidArgument, d)
		}
		o.margin = d
		return nil
	}
}

// WithBackoff bounds Acquire's retry delay on backends without a Waiter
// (and after errors): it starts at min and doubles up to max, jittered, and
// never sleeps past the remaining ttl a failed attempt reported.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) error {
		if min <= 0 || max <= 0 {
			return fmt.Errorf("%w: backoff bounds must be positive", ErrInvalidArgument)
		}
		o.minBackoff, o.maxBackoff = min, max
		return nil
	}
}

// WithKeeper makes Keep, Hold and Do keep the grant through k (a lease
// among k's, renewed with them, without a goroutine of its own) instead of
// a renewal goroutine per grant. The ttl they are given must be k's.
func WithKeeper(k *Keeper) Option {
	return func(o *options) error {
		if k == nil {
			return fmt.Errorf("%w: nil Keeper", ErrInvalidArgument)
		}
		o.keeper = k
		return nil
	}
}
