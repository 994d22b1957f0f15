package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Defaults (as Kubernetes' client-go).
const (
	DefaultLease      = 15 * time.Second
	DefaultRenewEvery = 5 * time.Second
	DefaultRetry      = 2 * time.Second
)

// MinInterval is the shortest renew and retry interval: shorter ones
// would have a leader or a follower call the backend in a busy loop. The
// lease is within the backend's limits (lock.LimitsOf) and at least three
// renew intervals; every duration is at most lock.MaxTTL.
const MinInterval = time.Millisecond

// Term is one leadership: who, which term (the fencing token), since when.
type Term struct {
	Identity string
	Term     uint64
	Since    time.Time
}

type settings struct {
	lease, renew, retry time.Duration
	onElected           func(Term)
	onDemoted           func(Term, error)
}

// WithLease sets the lease: how long a crashed leader blocks the election.
// It is a ttl: Run checks it against the backend's limits (an error that
// matches lock.ErrInvalidTTL).
func WithLease(d time.Duration) lock.Option {
	return lock.BackendOption("leader.WithLease", func(s *settings) error {
		if err := lock.DefaultLimits.CheckTTL(d); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		s.lease = d
		return nil
	})
}

// WithRenewEvery sets how often the leader renews its lease; at most a
// third of the lease, so that two renewals can fail before it steps down.
func WithRenewEvery(d time.Duration) lock.Option {
	return lock.BackendOption("leader.WithRenewEvery", func(s *settings) error {
		if d < MinInterval || d > lock.MaxTTL {
			return fmt.Errorf("renew interval %v must be in [%v, %v]", d, MinInterval, lock.MaxTTL)
		}
		s.renew = d
		return nil
	})
}

// WithRetry sets the longest a follower waits between two attempts when no
// release notification arrives.
func WithRetry(d time.Duration) lock.Option {
	return lock.BackendOption("leader.WithRetry", func(s *settings) error {
		if d < MinInterval || d > lock.MaxTTL {
			return fmt.Errorf("retry interval %v must be in [%v, %v]", d, MinInterval, lock.MaxTTL)
		}
		s.retry = d
		return nil
	})
}

// OnElected runs f (synchronously, before fn) each time this process is
// elected.
func OnElected(f func(Term)) lock.Option {
	return lock.BackendOption("leader.OnElected", func(s *settings) error { s.onElected = f; return nil })
}

// OnDemoted runs f after fn has returned and the lease was released, with
// why the term ended: an error matching lock.ErrLost, the context's cause on
// shutdown, fn's error, or nil when fn returned nil.
func OnDemoted(f func(Term, error)) lock.Option {
	return lock.BackendOption("leader.OnDemoted", func(s *settings) error { s.onDemoted = f; return nil })
}

// Key is the lock key of the election called name.
func Key(name string) string { return "leader/" + name }

// Run campaigns for leadership of name on l until ctx ends, and calls fn
// for each term won (see the package documentation). It returns nil when ctx
// ends, and an error only for invalid arguments or options. fn's errors end
// the term (they are logged and passed to OnDemoted); Run then campaigns
// again after the retry interval.
func Run(ctx context.Context, l lock.Lock, name string, fn func(ctx context.Context) error, opts ...lock.Option) error {
	s := &settings{lease: DefaultLease, renew: DefaultRenewEvery, retry: DefaultRetry}
	cfg, err := lock.NewConfig(s, opts)
	if err != nil {
		return err
	}
	switch {
	case l == nil || fn == nil:
		return fmt.Errorf("%w: leader.Run: nil Lock or function", lock.ErrInvalidArgument)
	case ctx == nil:
		return fmt.Errorf("%w: leader.Run: nil context", lock.ErrInvalidArgument)
	case s.renew > s.lease/3: // renew*3 > lease, without overflow
		return fmt.Errorf("%w: leader: WithRenewEvery(%v) is more than a third of the lease %v", lock.ErrInvalidArgument, s.renew, s.lease)
	}
	if err := lock.LimitsOf(l).CheckTTL(s.lease); err != nil {
		return fmt.Errorf("leader: WithLease(%v): %w", s.lease, err)
	}
	if err := lock.CheckName("election name", name); err != nil {
		return err
	}
	e := &election{l: l, key: Key(name), identity: lock.OwnerOf(l, cfg.Owner), fn: fn, s: s, cfg: cfg, m: newMetrics(cfg, name)}
	return e.run(ctx)
}

type election struct {
	l        lock.Lock
	key      string
	identity string
	fn       func(context.Context) error
	s        *settings
	cfg      *lock.Config
	m        *metrics
}

func (e *election) run(ctx context.Context) error {
	// A follower waits for a release notification, the lease a failed
	// attempt reported as remaining, or the retry interval.
	acq := *e.cfg
	acq.MinBackoff, acq.MaxBackoff = min(e.s.retry/4, 100*time.Millisecond), e.s.retry
	for {
		h, err := backendkit.AcquireWith(ctx, &acq, e.l, []string{e.key}, func(ctx context.Context) (lock.Handle, error) {
			h, err := e.l.TryAcquire(ctx, e.key, e.s.lease)
			return h, e.capHint(err)
		})
		if ctx.Err() != nil {
			if h != nil {
				_ = h.Release(context.WithoutCancel(ctx))
			}
			return nil
		}
		if err != nil {
			if errors.Is(err, lock.ErrInvalidArgument) {
				return err
			}
			e.cfg.Logger.Warn("leasehold: leader campaign failed, retrying", "election", e.key, "err", err)
			if backendkit.Sleep(ctx, e.s.retry) != nil {
				return nil
			}
			continue
		}
		cause := e.lead(ctx, h)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(cause, lock.ErrLost) && backendkit.Sleep(ctx, e.s.retry) != nil {
			return nil // fn ended its term: let a peer have a go first
		}
	}
}

// capHint shortens the remaining lease that a refused attempt reports to
// nine tenths of the retry interval: backendkit.AcquireWith waits for a release
// notification until that hint (plus a jitter of at most 21 ms) has passed,
// and a notification can be lost (a dropped pub/sub connection), so a
// follower must not rely on it for longer than the retry interval.
func (e *election) capHint(err error) error {
	if limit := e.s.retry - e.s.retry/10; lock.RemainingTTL(err) > limit {
		return backendkit.NotAcquired(e.key, limit)
	}
	return err
}

// lead runs one term and returns why it ended.
func (e *election) lead(ctx context.Context, h lock.Handle) error {
	term := Term{Identity: e.identity, Term: h.Token(), Since: time.Now()}
	e.cfg.Logger.Info("leasehold: elected leader", "election", e.key, "term", term.Term, "identity", term.Identity)
	e.m.transitions.Add(context.WithoutCancel(ctx), 1, e.m.elected)
	e.m.leading.Add(context.WithoutCancel(ctx), 1, e.m.attrs)
	if e.s.onElected != nil {
		e.s.onElected(term)
	}
	err := lock.Hold(ctx, h, e.s.lease, e.fn,
		lock.WithRenewInterval(e.s.renew), lock.WithMargin(e.s.renew),
		lock.WithLogger(e.cfg.Logger), lock.WithMeterProvider(e.cfg.MeterProvider), lock.WithTracerProvider(e.cfg.TracerProvider))
	cause := err
	if ctx.Err() != nil && !errors.Is(err, lock.ErrLost) {
		cause = context.Cause(ctx)
	}
	level, msg := e.cfg.Logger.Info, "leasehold: resigned leadership"
	if errors.Is(cause, lock.ErrLost) {
		level, msg = e.cfg.Logger.Warn, "leasehold: lost leadership"
	}
	level(msg, "election", e.key, "term", term.Term, "held", time.Since(term.Since).Round(time.Millisecond), "cause", cause)
	e.m.leading.Add(context.WithoutCancel(ctx), -1, e.m.attrs)
	e.m.transitions.Add(context.WithoutCancel(ctx), 1, e.m.demoted)
	e.m.tenure.Record(context.WithoutCancel(ctx), time.Since(term.Since).Seconds(), e.m.attrs)
	if e.s.onDemoted != nil {
		e.s.onDemoted(term, cause)
	}
	return cause
}

// Observe reports the current leader of name without campaigning; ok is
// false when no one leads. It needs a backend with lock.Inspector. Since is
// zero when the backend does not record when a grant was made.
func Observe(ctx context.Context, l lock.Lock, name string) (t Term, ok bool, err error) {
	in, isInspector := l.(lock.Inspector)
	if !isInspector {
		return Term{}, false, fmt.Errorf("%w: leader.Observe: %T cannot say who holds a key", lock.ErrInvalidArgument, l)
	}
	if err := lock.CheckName("election name", name); err != nil {
		return Term{}, false, err
	}
	g, ok, err := in.Inspect(ctx, Key(name))
	if err != nil || !ok {
		return Term{}, false, err
	}
	return termOf(g), true, nil
}

func termOf(g lock.Grant) Term { return Term{Identity: g.Owner, Term: g.Token, Since: g.Since} }

// Observed is one election's current leader, as ObserveAll reports it.
type Observed struct {
	Name string
	Term
}

// ObserveAll reports the current leader of every election whose name
// starts with prefix and that has one, sorted by name, in one List call.
// It needs a backend with lock.Inspector. A prefix other than "" (every
// election) follows the rule of election names.
func ObserveAll(ctx context.Context, l lock.Lock, prefix string) ([]Observed, error) {
	in, isInspector := l.(lock.Inspector)
	if !isInspector {
		return nil, fmt.Errorf("%w: leader.ObserveAll: %T cannot list its grants", lock.ErrInvalidArgument, l)
	}
	if prefix != "" {
		if err := lock.CheckName("election name prefix", prefix); err != nil {
			return nil, err
		}
	}
	grants, err := in.List(ctx, Key(prefix))
	if err != nil {
		return nil, err
	}
	out := make([]Observed, len(grants))
	for i, g := range grants {
		out[i] = Observed{Name: strings.TrimPrefix(g.Key, Key("")), Term: termOf(g)}
	}
	return out, nil
}

type metrics struct {
	transitions      metric.Int64Counter
	leading          metric.Int64UpDownCounter
	tenure           metric.Float64Histogram
	attrs            metric.MeasurementOption
	elected, demoted metric.MeasurementOption
}

func newMetrics(cfg *lock.Config, name string) *metrics {
	m := backendkit.TelemetryOf(cfg).Meter
	el := attribute.String("leasehold.election", name)
	out := &metrics{
		attrs:   metric.WithAttributeSet(attribute.NewSet(el)),
		elected: metric.WithAttributeSet(attribute.NewSet(el, attribute.String("leasehold.transition", "elected"))),
		demoted: metric.WithAttributeSet(attribute.NewSet(el, attribute.String("leasehold.transition", "demoted"))),
	}
	out.transitions, _ = m.Int64Counter("leasehold.leader.transitions",
		metric.WithDescription("Leadership gained (elected) and lost or given up (demoted)."))
	out.leading, _ = m.Int64UpDownCounter("leasehold.leader.leading",
		metric.WithDescription("1 while this process leads the election."))
	out.tenure, _ = m.Float64Histogram("leasehold.leader.tenure", metric.WithUnit("s"),
		metric.WithDescription("Time as leader, per term."))
	return out
}
