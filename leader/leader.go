package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Defaults (as Kubernetes' client-go).
const (
	DefaultTTL           = 15 * time.Second
	DefaultRenewInterval = 5 * time.Second
	DefaultRetryInterval = 2 * time.Second
)

// MinInterval is the shortest renew and retry interval: shorter ones
// would have a leader or a follower call the backend in a busy loop. The
// ttl is within the backend's limits (lock.LimitsOf) and at least three
// renew intervals; every duration is at most lock.MaxTTL.
const MinInterval = time.Millisecond

// ErrPanicked is the cause OnDemoted is given for a term whose fn (or
// OnElected) panicked. The grant is released, and the panic goes on up
// through Run.
var ErrPanicked = errors.New("leader: fn panicked")

// errGoexit is the cause OnDemoted is given for a term whose fn (or
// OnElected) called runtime.Goexit (a test's t.FailNow).
var errGoexit = errors.New("leader: fn called runtime.Goexit")

// Term is one leadership: who, which term (the fencing token), since when.
type Term struct {
	Owner string // the leader's owner identity: its backend's (lock.Owned)
	Term  uint64
	Since time.Time
}

// Option configures Run.
type Option func(*config) error

type config struct {
	ttl, renew, retry time.Duration
	ttlSet, renewSet  bool
	keeper            *lock.Keeper
	onElected         func(Term)
	onDemoted         func(Term, error)
	common            lock.Common
}

// WithTTL sets the leader's ttl (default DefaultTTL): how long a crashed
// leader blocks the election. Run checks it against the backend's limits
// (an error that matches lock.ErrInvalidTTL).
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if err := lock.DefaultLimits.CheckTTL(d); err != nil {
			return fmt.Errorf("WithTTL(%v): %w", d, err)
		}
		c.ttl, c.ttlSet = d, true
		return nil
	}
}

// WithRenewInterval sets how often the leader renews its grant (default
// DefaultRenewInterval); at most a third of the ttl, so that two renewals
// can fail before it steps down.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < MinInterval || d > lock.MaxTTL {
			return fmt.Errorf("WithRenewInterval(%v): the renew interval must be in [%v, %v]", d, MinInterval, lock.MaxTTL)
		}
		c.renew, c.renewSet = d, true
		return nil
	}
}

// WithRetryInterval sets the longest a follower waits between two attempts
// when no release notification arrives (default DefaultRetryInterval).
func WithRetryInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < MinInterval || d > lock.MaxTTL {
			return fmt.Errorf("WithRetryInterval(%v): the retry interval must be in [%v, %v]", d, MinInterval, lock.MaxTTL)
		}
		c.retry = d
		return nil
	}
}

// WithKeeper keeps the leader's grant alive through k (a lock.Keeper over
// the same Lock) instead of a renewal goroutine of its own: for a process
// that runs many elections at once (one per shard or tenant). The ttl and
// the renewal are k's: WithTTL, if given, must equal k's ttl, and
// WithRenewInterval is refused. A term then ends at k's first renewal that
// finds the grant gone, or at its ValidUntil (less k's margin): k does not
// watch a backend's own loss report, so on PostgreSQL and etcd a dropped
// session or revoked lease ends the term up to one renewal period later
// than without it (the fencing token still orders the writes). Once k is
// closed, Run returns the error of the next term's Keep (see Run).
func WithKeeper(k *lock.Keeper) Option {
	return func(c *config) error {
		if k == nil {
			return errors.New("WithKeeper: nil Keeper")
		}
		c.keeper = k
		return nil
	}
}

// OnElected runs f each time this process is elected: synchronously,
// before fn, once the term's lease is kept (renewed, as it is while fn
// runs), so that f may take longer than the ttl. If the term ends while f
// runs (the grant is lost, or Run's context ends), fn is not called for
// it; OnDemoted follows as for any term.
func OnElected(f func(Term)) Option {
	return func(c *config) error { c.onElected = f; return nil }
}

// OnDemoted runs f after fn has returned and the grant was released, with
// why the term ended: an error matching lock.ErrLost, the context's cause on
// shutdown, fn's error, nil when fn returned nil, or ErrPanicked when fn
// (or OnElected) panicked; the panic then goes on up through Run once f
// has returned (a runtime.Goexit in fn ends the term the same way, with
// an error of its own).
func OnDemoted(f func(Term, error)) Option {
	return func(c *config) error { c.onDemoted = f; return nil }
}

// WithCommon sets where logs, metrics and spans go (lock.Common). A term's
// owner is the one its grant is stored with, the backend's: an Owner that
// differs from the Lock's (lock.Owned) is refused.
func WithCommon(c lock.Common) Option {
	return func(cfg *config) error { cfg.common = cfg.common.Merge(c); return nil }
}

// Key is the lock key of the election called name.
func Key(name string) string { return "leader/" + name }

// Run campaigns for leadership of name on l until ctx ends, and calls fn
// for each term won (see the package documentation). It returns nil when ctx
// ends, and an error only for invalid arguments or options: before it
// campaigns, or once it has won the key when lock.Keep refuses to keep the
// grant (an error matching lock.ErrInvalidArgument: the WithKeeper Keeper
// is closed, or closed while Run campaigns; the grant is released and no
// term is announced). fn's errors end the term (they are logged and passed
// to OnDemoted); Run then campaigns again after the retry interval.
func Run(ctx context.Context, l lock.Lock, name string, fn func(ctx context.Context) error, opts ...Option) error {
	s := &config{ttl: DefaultTTL, renew: DefaultRenewInterval, retry: DefaultRetryInterval}
	if err := backendkit.Apply("leader", s, opts); err != nil {
		return err
	}
	if s.keeper != nil {
		switch {
		case s.ttlSet && s.ttl != s.keeper.TTL():
			return backendkit.Invalid("leader", "WithTTL(%v) differs from the Keeper's ttl %v", s.ttl, s.keeper.TTL())
		case s.renewSet:
			return backendkit.Invalid("leader", "WithRenewInterval with WithKeeper: the Keeper renews")
		}
		s.ttl, s.renew = s.keeper.TTL(), s.keeper.TTL()/3
	}
	switch {
	case l == nil || fn == nil:
		return backendkit.Invalid("leader", "nil Lock or function")
	case ctx == nil:
		return backendkit.Invalid("leader", "nil context")
	case s.renew > s.ttl/3: // renew*3 > ttl, without overflow
		return backendkit.Invalid("leader", "WithRenewInterval(%v) is more than a third of the ttl %v", s.renew, s.ttl)
	}
	if err := lock.LimitsOf(l).CheckTTL(s.ttl); err != nil {
		return backendkit.Invalid("leader", "WithTTL(%v): %w", s.ttl, err)
	}
	if err := backendkit.CheckName("election name", name); err != nil {
		return backendkit.Invalid("leader", "%w", err)
	}
	c, err := backendkit.ResolveOn("leader", s.common, l)
	if err != nil {
		return err
	}
	tel := backendkit.NewTelemetry(c)
	e := &election{l: l, key: Key(name), owner: c.Owner, fn: fn, s: s, log: c.Logger, m: newMetrics(tel, name)}
	// A follower waits for a release notification, the ttl a failed
	// attempt reported as remaining, or the retry interval.
	e.acquireOpts = []lock.Option{tel.HelperOption(c), lock.WithBackoff(min(s.retry/4, 100*time.Millisecond), s.retry)}
	e.holdOpts = []lock.Option{tel.HelperOption(c), lock.WithRenewInterval(s.renew), lock.WithMargin(s.renew)}
	if s.keeper != nil {
		e.holdOpts = []lock.Option{tel.HelperOption(c), lock.WithKeeper(s.keeper)}
	}
	return e.run(ctx)
}

type election struct {
	l           lock.Lock
	key         string
	owner       string
	fn          func(context.Context) error
	s           *config
	log         *slog.Logger
	m           *metrics
	acquireOpts []lock.Option
	holdOpts    []lock.Option
}

func (e *election) run(ctx context.Context) error {
	for {
		h, err := backendkit.AcquireWith(ctx, e.l, []string{e.key}, func(ctx context.Context) (lock.Handle, error) {
			h, err := e.l.TryAcquire(ctx, e.key, e.s.ttl)
			return h, e.capHint(err)
		}, e.acquireOpts...)
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
			e.log.Warn("leasehold: leader campaign failed, retrying", "election", e.key, "err", err)
			if backendkit.Sleep(ctx, e.s.retry) != nil {
				return nil
			}
			continue
		}
		cause, elected := e.lead(ctx, h)
		if ctx.Err() != nil {
			return nil
		}
		if !elected {
			// The grant could not be kept (lock.Keep refused it, and
			// released it): no term began.
			if errors.Is(cause, lock.ErrInvalidArgument) {
				return cause // refused again on every campaign (a closed Keeper)
			}
			e.log.Warn("leasehold: leader campaign failed, retrying", "election", e.key, "err", cause)
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

// lead runs one term on h and returns why it ended. elected is false when
// the grant could not be kept (cause is then lock.Hold's error, and h was
// released): no term began, and none was announced. The term is announced
// (log, metrics, OnElected) under the lease, once it is renewed: a slow
// OnElected does not outlive the grant, and fn does not start when the
// term ended meanwhile.
func (e *election) lead(ctx context.Context, h lock.Handle) (cause error, elected bool) {
	term := Term{Owner: e.owner, Term: h.Token(), Since: time.Now()}
	returned := false
	defer func() {
		if !elected || returned {
			return
		}
		// fn (or OnElected) panicked, or called runtime.Goexit: lock.Hold
		// released the grant on the way out; the term ends as any other
		// does, and the panic (or the Goexit) goes on up through Run.
		p := recover()
		cause := ErrPanicked
		if p == nil {
			cause = errGoexit
		}
		e.demote(ctx, term, cause)
		if p != nil {
			panic(p)
		}
	}()
	err := lock.Hold(ctx, h, e.s.ttl, func(ctx context.Context) error {
		elected = true
		e.log.Info("leasehold: elected leader", "election", e.key, "term", term.Term, "owner", term.Owner)
		e.m.transitions.Add(context.WithoutCancel(ctx), 1, e.m.elected)
		e.m.leading.Add(context.WithoutCancel(ctx), 1, e.m.attrs)
		if e.s.onElected != nil {
			e.s.onElected(term)
		}
		if ctx.Err() != nil {
			return nil // lost, or Run's context ended, during OnElected
		}
		return e.fn(ctx)
	}, e.holdOpts...)
	returned = true
	if !elected {
		return err, false
	}
	cause = err
	if ctx.Err() != nil && !errors.Is(err, lock.ErrLost) {
		cause = context.Cause(ctx)
	}
	e.demote(ctx, term, cause)
	return cause, true
}

// demote ends term: it logs why, updates the metrics and calls OnDemoted.
func (e *election) demote(ctx context.Context, term Term, cause error) {
	level, msg := e.log.Info, "leasehold: resigned leadership"
	if errors.Is(cause, lock.ErrLost) || errors.Is(cause, ErrPanicked) {
		level, msg = e.log.Warn, "leasehold: lost leadership"
	}
	level(msg, "election", e.key, "term", term.Term, "held", time.Since(term.Since).Round(time.Millisecond), "cause", cause)
	e.m.leading.Add(context.WithoutCancel(ctx), -1, e.m.attrs)
	e.m.transitions.Add(context.WithoutCancel(ctx), 1, e.m.demoted)
	e.m.tenure.Record(context.WithoutCancel(ctx), time.Since(term.Since).Seconds(), e.m.attrs)
	if e.s.onDemoted != nil {
		e.s.onDemoted(term, cause)
	}
}

// Observe reports the current leader of name without campaigning; ok is
// false when no one leads. It needs a backend with lock.Inspector. Since is
// zero when the backend does not record when a grant was made.
func Observe(ctx context.Context, l lock.Lock, name string) (t Term, ok bool, err error) {
	in, isInspector := l.(lock.Inspector)
	if !isInspector {
		return Term{}, false, backendkit.Invalid("leader", "Observe: %T cannot say who holds a key", l)
	}
	if err := backendkit.CheckName("election name", name); err != nil {
		return Term{}, false, backendkit.Invalid("leader", "%w", err)
	}
	g, ok, err := in.Inspect(ctx, Key(name))
	if err != nil || !ok {
		return Term{}, false, err
	}
	return termOf(g), true, nil
}

func termOf(g lock.Grant) Term { return Term{Owner: g.Owner, Term: g.Token, Since: g.Since} }

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
		return nil, backendkit.Invalid("leader", "ObserveAll: %T cannot list its grants", l)
	}
	if prefix != "" {
		if err := backendkit.CheckName("election name prefix", prefix); err != nil {
			return nil, backendkit.Invalid("leader", "%w", err)
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

func newMetrics(tel *backendkit.Telemetry, name string) *metrics {
	m := tel.Meter
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
