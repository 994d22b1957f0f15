package lock

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the helpers.
const (
	DefaultTTL        = 30 * time.Second       // Do's lease
	DefaultMinBackoff = 5 * time.Millisecond   // first retry of Acquire without a Waiter
	DefaultMaxBackoff = 500 * time.Millisecond // longest retry of Acquire without a hint

	// MinRenewInterval is Keep's shortest renewal period: a shorter one
	// (WithRenewInterval, or ttl/3 of a ttl under 3 ms) renews in a busy
	// loop against the backend, and Keep refuses it.
	MinRenewInterval = time.Millisecond
)

// Option configures a backend constructor or a helper (Acquire, Keep, Do,
// HealthCheck). Options a receiver does not use are ignored, except a
// backend's own options given to another backend, which are an error.
type Option func(*Config)

// Config is what Options set. Backends read it through NewConfig; users set
// it only through Options.
type Config struct {
	Owner          string               // owner identity; default NewOwner()
	Logger         *slog.Logger         // default slog.Default()
	MeterProvider  metric.MeterProvider // default the global provider
	TracerProvider trace.TracerProvider // default the global provider

	TTL           time.Duration // Do's lease ttl; default DefaultTTL
	RenewInterval time.Duration // Keep's renewal period; default ttl/3
	Margin        time.Duration // Keep gives up this long before ValidUntil
	MinBackoff    time.Duration // Acquire's first retry without a Waiter
	MaxBackoff    time.Duration // Acquire's longest wait without a hint

	// Backend holds a backend's own settings while its options are
	// applied (see BackendOption); nil for the helpers.
	Backend any

	errs []error
}

// NewConfig applies opts over the defaults. backend is a pointer to the
// backend's own settings struct (or nil); BackendOption functions fill it.
func NewConfig(backend any, opts []Option) (*Config, error) {
	c := &Config{
		TTL:        DefaultTTL,
		MinBackoff: DefaultMinBackoff,
		MaxBackoff: DefaultMaxBackoff,
		Backend:    backend,
	}
	for _, o := range opts {
		if o == nil {
			c.fail(fmt.Errorf("%w: nil option", ErrInvalidArgument))
			continue
		}
		o(c)
	}
	if c.Owner == "" {
		c.Owner = NewOwner()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MaxBackoff < c.MinBackoff {
		c.fail(fmt.Errorf("%w: max backoff %v is below min backoff %v", ErrInvalidArgument, c.MaxBackoff, c.MinBackoff))
	}
	return c, errors.Join(c.errs...)
}

func (c *Config) fail(err error) { c.errs = append(c.errs, err) }

// BackendOption builds an Option that sets a field of a backend's (or a
// tool's: leader, timers) settings struct S. Given to a constructor whose settings are not an *S, it makes
// NewConfig fail with ErrInvalidArgument. f may reject its value by
// returning an error.
func BackendOption[S any](name string, f func(*S) error) Option {
	return func(c *Config) {
		s, ok := c.Backend.(*S)
		if !ok {
			c.fail(fmt.Errorf("%w: option %s does not apply here", ErrInvalidArgument, name))
			return
		}
		if err := f(s); err != nil {
			c.fail(fmt.Errorf("%w: %s: %w", ErrInvalidArgument, name, err))
		}
	}
}

// WithOwner sets the owner identity stored with every grant of a backend
// instance and shown by Inspector. It follows CheckOwner: 1 to MaxKeyLen
// bytes of UTF-8 without control characters.
func WithOwner(owner string) Option {
	return func(c *Config) {
		if err := CheckOwner("owner", owner); err != nil {
			c.fail(err)
			return
		}
		c.Owner = owner
	}
}

// WithLogger sets the logger for state changes (Info/Warn) and per-operation
// detail (Debug).
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) {
		if l == nil {
			c.fail(fmt.Errorf("%w: nil logger", ErrInvalidArgument))
			return
		}
		c.Logger = l
	}
}

// WithMeterProvider sets where metrics go instead of the global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *Config) {
		if mp == nil {
			c.fail(fmt.Errorf("%w: nil meter provider", ErrInvalidArgument))
			return
		}
		c.MeterProvider = mp
	}
}

// WithTracerProvider sets where spans go instead of the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Config) {
		if tp == nil {
			c.fail(fmt.Errorf("%w: nil tracer provider", ErrInvalidArgument))
			return
		}
		c.TracerProvider = tp
	}
}

// WithTTL sets the lease ttl of Do.
func WithTTL(ttl time.Duration) Option {
	return func(c *Config) {
		if err := DefaultLimits.CheckTTL(ttl); err != nil {
			c.fail(err)
			return
		}
		c.TTL = ttl
	}
}

// WithRenewInterval sets how often Keep renews (default ttl/3). It should
// stay well below the ttl: a renewal that fails is retried until
// ValidUntil, and the lease is lost after that.
func WithRenewInterval(d time.Duration) Option {
	return func(c *Config) {
		if d < MinRenewInterval {
			c.fail(fmt.Errorf("%w: renew interval must be at least %v, got %v", ErrInvalidArgument, MinRenewInterval, d))
			return
		}
		c.RenewInterval = d
	}
}

// WithMargin makes Keep give the grant up d before ValidUntil when no
// renewal has succeeded by then (default 0: at ValidUntil), so that the
// work has d to stop before a successor can be granted the key. Leader
// election uses it to step down in time.
func WithMargin(d time.Duration) Option {
	return func(c *Config) {
		if d < 0 {
			c.fail(fmt.Errorf("%w: margin must not be negative, got %v", ErrInvalidArgument, d))
			return
		}
		c.Margin = d
	}
}

// WithBackoff bounds Acquire's retry delay on backends without a Waiter
// (and after errors): it starts at min and doubles up to max, jittered, and
// never sleeps past the remaining ttl a failed attempt reported.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Config) {
		if min <= 0 || max <= 0 {
			c.fail(fmt.Errorf("%w: backoff bounds must be positive", ErrInvalidArgument))
			return
		}
		c.MinBackoff, c.MaxBackoff = min, max
	}
}
