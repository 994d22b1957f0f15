package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

// Lease keeps a Handle alive in the background and tells its holder the
// moment it can no longer trust the grant. Create it with Keep; end it with
// Release.
type Lease struct {
	h        Handle
	ttl      time.Duration
	cfg      *options
	tel      *kit.Telemetry
	ctx      context.Context // a child of tokCtx
	cancel   context.CancelCauseFunc
	tokCtx   kit.TokenContext // the caller's context with h's token, in place
	stopOnce sync.Once
	*loop    // Keep's renewal loop; nil for a Keeper's lease

	mu         sync.Mutex
	validUntil time.Time
	renewing   bool // an Extend is in flight
	lost       bool // the loss was reported
	releasing  bool // a Keeper's lease that Release or Close took: no round renews it

	// A lease of a Keeper has no goroutine, timer or channels of its
	// own (no loop): k renews it and ends it.
	k       *Keeper
	at      int  // its index in k.leases (leaseSet), under k.mu
	adopted bool // Keeper.Keep adopted it (the Batch did not make it)
	solo    bool // renewed with its own Extend (owned by k's renewal loop)
}

// withToken is ctx carrying l's token, for the parent of l's context: it
// lives in the Lease (kit.TokenContext), so that a lease costs no context
// allocation for its token.
func (l *Lease) withToken(ctx context.Context) context.Context {
	l.tokCtx.Set(ctx, l.h.Token())
	return &l.tokCtx
}

// Keep renews h every ttl/3 (WithRenewInterval) until Release, and returns
// a Lease whose Context is a child of ctx that carries h's fencing token
// (TokenFrom) and is cancelled, with a cause that matches ErrLost, as soon
// as the grant can no longer be trusted:
//
//   - an Extend returns ErrLost (renewed / lost / unknown: an unknown
//     outcome is retried until ValidUntil);
//   - ValidUntil (less WithMargin) passes without a successful renewal:
//     for a handle already past it, before Keep returns (so Hold's fn
//     never starts on a live context);
//   - the handle's backend reports the loss by itself (LossNotifier).
//
// Renewal goes on after ctx ends, until Release: work that is told to stop
// keeps its grant while it winds down, so no successor overlaps it. Always
// call Release (Do does it for you).
func Keep(ctx context.Context, h Handle, ttl time.Duration, opts ...Option) (*Lease, error) {
	cfg, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return keep(ctx, cfg, h, ttl)
}

func keep(ctx context.Context, cfg *options, h Handle, ttl time.Duration) (*Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil Handle", ErrInvalidArgument)
	}
	// The handle's own limits (a backend's minimum ttl among them): a
	// lease whose renewals the backend would refuse is refused here.
	if err := LimitsOf(h).CheckTTL(ttl); err != nil {
		return nil, err
	}
	if cfg.keeper != nil {
		if ttl != cfg.keeper.ttl {
			return nil, fmt.Errorf("%w: ttl %v differs from the Keeper's %v (WithKeeper)", ErrInvalidArgument, ttl, cfg.keeper.ttl)
		}
		return cfg.keeper.Keep(ctx, h)
	}
	every, err := renewInterval(cfg, ttl)
	if err != nil {
		return nil, err
	}
	l := &Lease{
		h: h, ttl: ttl, cfg: cfg, tel: cfg.tel, validUntil: h.ValidUntil(),
		loop: &loop{every: every, stop: make(chan struct{}), done: make(chan struct{})},
	}
	l.ctx, l.cancel = context.WithCancelCause(l.withToken(ctx))
	l.tel.Active(1)
	l.expired = make(chan struct{})
	if d := time.Until(l.validUntil.Add(-cfg.margin)); d > 0 {
		l.expiry = time.AfterFunc(d, l.expire)
	} else {
		// Already past its deadline: the lease is lost before Keep returns
		// (a timer's function would run later, on another goroutine, and
		// fn would start with a live context). The timer, stopped, is
		// there for stopExpiry.
		l.expiry = time.AfterFunc(time.Hour, l.expire)
		l.expiry.Stop()
		l.expire()
	}
	go l.renew()
	return l, nil
}

// loop is the state of Keep's renewal goroutine.
type loop struct {
	every time.Duration
	stop  chan struct{} // closed by Release: stop renewing
	done  chan struct{} // closed when the renewal loop has returned

	// expiry runs expire at ValidUntil less the margin; each renewal moves
	// it. expired is closed by expire.
	expiry  *time.Timer
	expired chan struct{}
}

// renewInterval is the renewal period of a lease of ttl under cfg, or why
// cfg's is refused.
func renewInterval(cfg *options, ttl time.Duration) (time.Duration, error) {
	if cfg.margin >= ttl {
		return 0, fmt.Errorf("%w: margin %v must be below the ttl %v", ErrInvalidArgument, cfg.margin, ttl)
	}
	every := cfg.renew
	if every == 0 {
		every = ttl / 3
	}
	if every < MinRenewInterval {
		// A shorter period renews in a busy loop against the backend.
		return 0, fmt.Errorf("%w: renew interval %v is below the minimum %v (a ttl of at least %v renews every ttl/3)", ErrInvalidArgument, every, MinRenewInterval, 3*MinRenewInterval)
	}
	if every >= ttl-cfg.margin {
		return 0, fmt.Errorf("%w: renew interval %v must be below the ttl %v (less the margin %v)", ErrInvalidArgument, every, ttl, cfg.margin)
	}
	return every, nil
}

// Context is cancelled when the lease is lost (cause matches ErrLost), when
// the parent context ends, or after Release.
func (l *Lease) Context() context.Context { return l.ctx }

// Handle is the grant being kept.
func (l *Lease) Handle() Handle { return l.h }

// Token is the grant's fencing token.
func (l *Lease) Token() uint64 { return l.h.Token() }

// ValidUntil is the deadline of the last successful renewal.
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Err returns the loss (matching ErrLost) if the lease was lost, else nil.
func (l *Lease) Err() error {
	if c := context.Cause(l.ctx); errors.Is(c, ErrLost) {
		return c
	}
	return nil
}

// Release stops the renewal, waits until no renewal is in flight, and only
// then releases the grant. It returns the handle's Release error: ErrLost
// when the grant was already gone. Calling it again returns ErrLost.
func (l *Lease) Release(ctx context.Context) error {
	if l.k != nil {
		return l.k.release(ctx, l)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	first := false
	l.stopOnce.Do(func() { close(l.stop); first = true })
	<-l.done
	err := l.h.Release(ctx)
	if first {
		l.cancel(context.Canceled)
		l.tel.Active(-1)
	}
	return err
}

func (l *Lease) renew() {
	defer close(l.done)
	defer l.stopExpiry()
	var gone <-chan struct{}
	if n, ok := l.h.(LossNotifier); ok {
		gone = n.Lost()
	}
	next := time.NewTimer(l.every)
	defer next.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-gone:
			l.lose("backend", lost("the backend reported the grant gone"))
			return
		case <-l.expired: // expire lost the lease
			return
		case <-next.C:
		}
		until := l.ValidUntil()
		ectx, cancel := context.WithDeadline(context.Background(), until.Add(-l.cfg.margin))
		err, ok := l.extend(ectx, gone)
		cancel()
		if !ok {
			return
		}
		switch {
		case err == nil:
			until = l.h.ValidUntil()
			// The new deadline, unless expire has started: then the lease
			// is lost, whatever this renewal did.
			if !l.expiry.Stop() {
				return
			}
			l.mu.Lock()
			l.validUntil = until
			l.mu.Unlock()
			l.expiry.Reset(time.Until(until.Add(-l.cfg.margin)))
			l.tel.Renewal("renewed")
			next.Reset(l.every)
		case errors.Is(err, ErrInvalidArgument):
			// Refused input is refused again: retrying it until ValidUntil
			// would only hide the mistake.
			l.tel.Renewal("refused")
			l.lose("renewal", fmt.Errorf("%w (renewal refused: %w)", lost("the backend refused the renewal"), err))
			return
		case errors.Is(err, ErrLost):
			l.tel.Renewal("lost")
			l.lose("renewal", fmt.Errorf("%w (renewal: %w)", lost("the backend no longer has the grant"), err))
			return
		default:
			// Unknown: the grant may still be ours until ValidUntil. Try
			// again soon; expire ends it if nothing succeeds.
			l.tel.Renewal("unknown")
			l.cfg.logger().Debug("leasehold: renewal failed, retrying", "key", l.h.Key(), "valid_until", until, "err", err)
			next.Reset(max(l.every/4, 10*time.Millisecond))
		}
	}
}

// extend makes one renewal under ctx; ok is false when the lease was lost
// meanwhile (expire, or the backend reported the loss). The loop waits for
// the call to return in every case, so that renewal has stopped before
// Release goes on. Without a LossNotifier the call runs on the loop's own
// goroutine: expire, a timer's function, ends the lease on time even if
// the backend holds the call past ctx (a driver that ignores contexts on a
// stalled connection). With one, it runs on a goroutine of its own, so
// that a loss the backend reports during a call that does not answer ends
// the lease at once.
func (l *Lease) extend(ctx context.Context, gone <-chan struct{}) (err error, ok bool) {
	l.mu.Lock()
	if l.lost {
		l.mu.Unlock()
		return nil, false
	}
	l.renewing = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.renewing = false
		ok = ok && !l.lost
		l.mu.Unlock()
	}()
	if gone == nil {
		return l.h.Extend(ctx, l.ttl), true
	}
	extended := make(chan error, 1)
	go func() { extended <- l.h.Extend(ctx, l.ttl) }()
	select {
	case err = <-extended:
		return err, true
	case <-l.expired:
	case <-gone:
		l.lose("backend", lost("the backend reported the grant gone"))
	}
	<-extended
	return nil, false
}

// expire ends the lease when its validity (less the margin) has passed
// without a successful renewal: the function of the lease's expiry timer,
// which each renewal moves, or called by keep for a handle already past
// it. It closes expired, the loop's signal, last.
func (l *Lease) expire() {
	l.mu.Lock()
	renewing := l.renewing
	l.mu.Unlock()
	l.loseAtDeadline(renewing)
	close(l.expired)
}

// loseAtDeadline reports the loss of a lease whose validity (less the
// margin) has passed without a successful renewal; renewing says that a
// renewal was in flight.
func (l *Lease) loseAtDeadline(renewing bool) {
	switch {
	case renewing:
		l.lose("deadline", lost("validity ended during a renewal that did not answer"))
	case l.cfg.margin > 0:
		l.lose("deadline", lost(fmt.Sprintf("no successful renewal with %v of validity left", l.cfg.margin)))
	default:
		l.lose("deadline", lost("validity ended without a successful renewal"))
	}
}

// stopExpiry stops the expiry timer as the loop ends; when expire has
// started already, it waits until expire is done, so that no loss is
// reported after Release.
func (l *Lease) stopExpiry() {
	if !l.expiry.Stop() {
		<-l.expired
	}
}

// lose reports the loss of the lease, once.
func (l *Lease) lose(reason string, cause error) {
	l.mu.Lock()
	first := !l.lost
	l.lost = true
	l.mu.Unlock()
	if !first {
		return
	}
	l.tel.Loss(reason)
	l.cfg.logger().Warn("leasehold: lease lost", "key", l.h.Key(), "token", l.h.Token(), "reason", cause)
	l.cancel(cause)
}
