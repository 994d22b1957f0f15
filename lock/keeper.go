package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// keeperPool is how many renewals a Keeper runs at once for the handles
// its backend's Batch cannot renew (each with its own Extend), and how
// many releases ReleaseEach runs at once on a backend that is not an
// EachReleaser.
const keeperPool = 16

// keeperReleaseChunk is the most handles a Keeper gives one ReleaseEach
// (Close, and the releases of its leases sent together).
var keeperReleaseChunk = 1000

// Keeper holds many leases of one Lock and renews them together: one
// goroutine per Keeper, whatever the number of leases, and, on a backend
// that implements Batcher, renewal round trips that grow with the number
// of the backend's chunks rather than with the number of leases (see each
// backend's NewBatch for its chunk size). It is lock.Keep for a process
// that holds many things at once: partitions, tenants, shards, runs.
//
// Every lease renews every ttl/3 (WithRenewInterval) in one renewal round
// for all of them, and each Lease is on its own: its Context is cancelled,
// with a cause matching ErrLost, when its grant alone is found gone or
// when its ValidUntil (less WithMargin) passes without a successful
// renewal; the others go on. A round whose outcome is unknown (the backend
// did not answer) is retried sooner, until the leases' ValidUntil.
//
// A handle's own loss report (LossNotifier) is not watched: a Keeper
// learns of a loss in its next renewal round, at most one renewal period
// later, and by ValidUntil at the latest.
//
// A Lease's Release, on a backend that is an EachReleaser, goes at once
// when no release is in flight, and otherwise together with the others
// that arrive meanwhile, in the next ReleaseEach (at most 1,000 a call);
// each returns its own outcome, or its ctx's cause when ctx ends first.
// Close releases every lease (ReleaseEach, 1,000 a call) and ends the
// Keeper. A Keeper is safe for concurrent use.
type Keeper struct {
	l     Lock
	ttl   time.Duration
	every time.Duration
	cfg   *options

	open  sync.Mutex
	batch Batch // made on first use; nil when l is not a Batcher

	mu       sync.Mutex
	leases   leaseSet
	closed   bool
	round    chan struct{} // closed when the running renewal round ends; nil between rounds
	inflight int           // Releases under way (Keeper.release), which Close waits for
	drained  chan struct{} // closed when inflight falls to 0, for Close; nil when none waits
	expiry   *time.Timer   // fires at the earliest deadline of the leases
	expires  time.Time     // when expiry fires (zero: stopped)

	stop chan struct{}
	done chan struct{}

	rel releaser // the Leases' Releases, sent together

	holding *options // Hold's: cfg with WithKeeper(k)

	relMu     sync.Mutex
	relCtx    context.Context // Hold's releases' (releaseContext)
	relEnd    time.Time       // relCtx's deadline
	relCancel context.CancelFunc
}

// NewKeeper returns a Keeper of leases of l for ttl. The options are
// Keep's: WithRenewInterval (default ttl/3), WithMargin, WithCommon; the
// rules on them are Keep's too.
func NewKeeper(l Lock, ttl time.Duration, opts ...Option) (*Keeper, error) {
	cfg, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: nil Lock", ErrInvalidArgument)
	}
	if cfg.keeper != nil {
		return nil, fmt.Errorf("%w: WithKeeper is an option of Keep, Hold and Do, not of NewKeeper", ErrInvalidArgument)
	}
	if err := LimitsOf(l).CheckTTL(ttl); err != nil {
		return nil, err
	}
	every, err := renewInterval(cfg, ttl)
	if err != nil {
		return nil, err
	}
	k := &Keeper{
		l: l, ttl: ttl, every: every, cfg: cfg,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	k.rel.l = l
	holding := *cfg
	holding.keeper = k
	k.holding = &holding
	k.expiry = time.AfterFunc(time.Hour, k.expire)
	k.expiry.Stop()
	go k.run()
	return k, nil
}

// TTL is the ttl of the Keeper's leases.
func (k *Keeper) TTL() time.Duration { return k.ttl }

// Len is the number of leases the Keeper holds (lost ones included until
// they are released).
func (k *Keeper) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.leases)
}

// TryAcquire takes key for the Keeper's ttl if no one holds it
// (ErrNotAcquired if someone does) and keeps it. On a Batcher the grant
// is made through the Keeper's Batch. The Lease's Context is a child of
// ctx carrying the token, as Keep's; renewal goes on after ctx ends, until
// the Lease's Release or the Keeper's Close.
func (k *Keeper) TryAcquire(ctx context.Context, key string) (*Lease, error) {
	if err := validate(ctx, key, k.ttl, LimitsOf(k.l)); err != nil {
		return nil, err
	}
	h, err := k.tryAcquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return k.add(ctx, h, true)
}

// Acquire blocks until it holds key, as lock.Acquire does (on the Lock's
// Waiter when it has one; a backend's queue is not used: the grant must be
// the Batch's), and keeps it as TryAcquire does. The options are
// Acquire's (WithBackoff, WithCommon).
func (k *Keeper) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	cfg, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := validate(ctx, key, k.ttl, LimitsOf(k.l)); err != nil {
		return nil, err
	}
	h, err := acquireWith(ctx, cfg, k.l, []string{key}, func(ctx context.Context) (Handle, error) {
		return k.tryAcquire(ctx, key)
	})
	if err != nil {
		return nil, err
	}
	return k.add(ctx, h, true)
}

// Keep adopts h, a grant of the Keeper's Lock, and keeps it for the
// Keeper's ttl as lock.Keep would, without a goroutine of its own. Where
// the backend's Batch can renew h (Redis, memory) it is renewed with the
// others; otherwise with its own Extend, from a small pool. A Wrapper is
// renewed as the handle it wraps. A handle already past its ValidUntil
// (less WithMargin) gives a Lease whose Context is cancelled (ErrLost)
// before Keep returns; Release it all the same.
func (k *Keeper) Keep(ctx context.Context, h Handle) (*Lease, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil Handle", ErrInvalidArgument)
	}
	if err := LimitsOf(h).CheckTTL(k.ttl); err != nil {
		return nil, err
	}
	return k.add(ctx, h, false)
}

// Hold runs fn while the Keeper keeps h, then releases h: lock.Hold(ctx,
// h, k.TTL(), fn, lock.WithKeeper(k)), with the same rules for fn's
// context and the returned error, and no options to read on each call
// (a scheduler's runs go this way).
func (k *Keeper) Hold(ctx context.Context, h Handle, fn func(ctx context.Context) error) error {
	if fn == nil || ctx == nil {
		return fmt.Errorf("%w: nil function or context", ErrInvalidArgument)
	}
	return hold(ctx, k.holding, h, k.ttl, fn)
}

// Close stops renewing, releases every lease the Keeper holds (through
// ReleaseEach, 1,000 at a time: a round trip per backend chunk on an
// EachReleaser), waits for the Releases already under way (within ctx),
// and closes the Keeper's Batch. It returns the first error of a release
// other than ErrLost. Later calls to TryAcquire, Acquire and Keep fail;
// Close may be called again. The leases stay under the Keeper's watch
// until the renewal round in flight has ended: one whose ValidUntil
// passes meanwhile ends with ErrLost, as it would without Close.
func (k *Keeper) Close(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	k.mu.Lock()
	first := !k.closed
	k.closed = true
	ls := make([]*Lease, 0, len(k.leases))
	for _, l := range k.leases {
		// A lease whose Release has begun is that Release's to finish.
		mine := false
		l.stopOnce.Do(func() { mine = true })
		if mine {
			l.mu.Lock()
			l.releasing = true
			l.mu.Unlock()
			ls = append(ls, l)
		}
	}
	k.mu.Unlock()
	if first {
		close(k.stop)
	}
	<-k.done
	k.mu.Lock()
	for _, l := range ls {
		k.leases.remove(l)
	}
	k.mu.Unlock()
	var firstErr error
	for len(ls) > 0 {
		part := ls[:min(len(ls), keeperReleaseChunk)]
		ls = ls[len(part):]
		hs := make([]Handle, len(part))
		for i, l := range part {
			hs[i] = l.h
		}
		for i, err := range ReleaseEach(ctx, k.l, hs) {
			k.released(part[i])
			if err != nil && !errors.Is(err, ErrLost) && firstErr == nil {
				firstErr = err
			}
		}
	}
	// The Releases under way use the Batch (its sessions, its leases) and
	// the release context: they end first.
	k.mu.Lock()
	var drained chan struct{}
	if k.inflight > 0 {
		if k.drained == nil {
			k.drained = make(chan struct{})
		}
		drained = k.drained
	}
	k.mu.Unlock()
	if drained != nil {
		select {
		case <-drained:
		case <-ctx.Done():
			if firstErr == nil {
				firstErr = context.Cause(ctx)
			}
		}
	}
	k.open.Lock()
	b := k.batch
	k.open.Unlock()
	if b != nil {
		if err := b.Close(ctx); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	k.relMu.Lock()
	if k.relCancel != nil {
		k.relCancel()
	}
	k.relMu.Unlock()
	return firstErr
}

var errKeeperClosed = fmt.Errorf("%w: the Keeper is closed", ErrInvalidArgument)

// tryAcquire makes one attempt at key: through the Batch on a Batcher.
func (k *Keeper) tryAcquire(ctx context.Context, key string) (Handle, error) {
	b, err := k.batchFor(ctx)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return k.l.TryAcquire(ctx, key, k.ttl)
	}
	return b.TryAcquire(ctx, key)
}

// batchFor returns the Keeper's Batch, made on first use; nil when the
// Lock is not a Batcher.
func (k *Keeper) batchFor(ctx context.Context) (Batch, error) {
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return nil, errKeeperClosed
	}
	bl, ok := k.l.(Batcher)
	if !ok {
		return nil, nil
	}
	k.open.Lock()
	defer k.open.Unlock()
	if k.batch == nil {
		b, err := bl.NewBatch(ctx, k.ttl)
		if err != nil {
			return nil, err
		}
		k.batch = b
	}
	return k.batch, nil
}

// add makes h a lease of the Keeper. made says that the Keeper's Batch
// (or, without one, its Lock) made h.
func (k *Keeper) add(ctx context.Context, h Handle, made bool) (*Lease, error) {
	if k.cfg.margin >= k.ttl {
		_ = h.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: margin %v must be below the ttl %v", ErrInvalidArgument, k.cfg.margin, k.ttl)
	}
	l := &Lease{h: h, ttl: k.ttl, cfg: k.cfg, tel: k.cfg.tel, k: k,
		validUntil: h.ValidUntil(), adopted: !made}
	if _, ok := k.l.(Batcher); !ok {
		l.solo = true
	} else if !made {
		// An adopted handle goes to the Batch; a refusal sends it to the
		// pool (renewRound) for good.
		if _, err := k.batchFor(ctx); err != nil {
			l.solo = true
		}
	}
	l.ctx, l.cancel = context.WithCancelCause(l.withToken(ctx))
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		l.cancel(errKeeperClosed)
		_ = h.Release(context.WithoutCancel(ctx))
		return nil, errKeeperClosed
	}
	k.leases.add(l)
	if at := l.validUntil.Add(-k.cfg.margin); at.After(time.Now()) {
		k.armLocked(at)
	} else {
		// Already past its deadline: lost before add returns, not when
		// the expiry timer's function gets to it on another goroutine.
		// It stays a lease of the Keeper until its Release.
		l.loseAtDeadline(false)
	}
	k.mu.Unlock()
	l.tel.Active(1)
	return l, nil
}

// releaseContext is the context of the release that Hold makes once fn
// returned, for a lease of a Keeper: a deadline at least a second past
// the lease's ValidUntil, shared by the Keeper's leases so that a release
// makes no timer of its own (it carries no caller's values). A new one is
// made, a ttl further than the lease needs, when the last one ends too
// soon for the lease: about once a ttl; its deadline is at most a ttl past
// the latest need of the Keeper's leases (a handle adopted with a longer
// ttl than the Keeper's pushes it further). Nil for a lease of no Keeper:
// Hold makes its own.
func (l *Lease) releaseContext() context.Context {
	k := l.k
	if k == nil {
		return nil
	}
	need := l.ValidUntil().Add(time.Second)
	k.relMu.Lock()
	defer k.relMu.Unlock()
	if k.relCtx == nil || k.relCtx.Err() != nil || k.relEnd.Before(need) {
		// The context replaced ends at its deadline by itself (or was
		// cancelled by Close): a release may still use it.
		k.relEnd = need.Add(k.ttl)
		k.relCtx, k.relCancel = context.WithDeadline(context.Background(), k.relEnd)
	}
	return k.relCtx
}

// batchOrNil is the Keeper's Batch, nil before the first use.
func (k *Keeper) batchOrNil() Batch {
	k.open.Lock()
	defer k.open.Unlock()
	return k.batch
}

// armLocked makes expiry fire by at.
func (k *Keeper) armLocked(at time.Time) {
	if k.expires.IsZero() || at.Before(k.expires) {
		k.expires = at
		k.expiry.Reset(time.Until(at))
	}
}

// release is Lease.Release for a lease of the Keeper: no renewal round
// takes the lease any more, any round in flight ends (meanwhile the lease
// is watched as before: its ValidUntil passing ends it with ErrLost), the
// lease leaves the Keeper, and only then is the grant released, with the
// releases of other leases that arrive meanwhile (releaser). A ctx that
// ends first ends the wait with its cause.
func (k *Keeper) release(ctx context.Context, l *Lease) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	first := false
	l.stopOnce.Do(func() { first = true })
	k.mu.Lock()
	if first {
		l.mu.Lock()
		l.releasing = true
		l.mu.Unlock()
	}
	round := k.round
	k.inflight++
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		if k.inflight--; k.inflight == 0 && k.drained != nil {
			close(k.drained)
			k.drained = nil
		}
		k.mu.Unlock()
	}()
	var err error
	if round != nil {
		select {
		case <-round:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	}
	k.mu.Lock()
	k.leases.remove(l)
	k.mu.Unlock()
	if err == nil {
		err = k.rel.release(ctx, l.h)
	}
	if first {
		k.released(l)
	}
	return err
}

// released ends l once its grant was released (or its release tried): no
// loss is reported after Release.
func (k *Keeper) released(l *Lease) {
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
	l.cancel(context.Canceled)
	l.tel.Active(-1)
}

func (k *Keeper) run() {
	defer close(k.done)
	next := time.NewTimer(k.every)
	defer next.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-next.C:
		}
		if k.renewRound() {
			next.Reset(max(k.every/4, 10*time.Millisecond))
		} else {
			next.Reset(k.every)
		}
	}
}

// renewRound renews every live lease once: the Batch's in one Renew, the
// others with their own Extend. It reports whether any outcome was
// unknown.
func (k *Keeper) renewRound() (unknown bool) {
	k.mu.Lock()
	var batched, solo []*Lease
	var deadline time.Time
	for _, l := range k.leases {
		l.mu.Lock()
		skip, until := l.lost || l.releasing, l.validUntil
		if !skip {
			l.renewing = true
		}
		l.mu.Unlock()
		if skip {
			continue
		}
		if l.solo {
			solo = append(solo, l)
		} else {
			batched = append(batched, l)
		}
		if d := until.Add(-k.cfg.margin); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	if len(batched)+len(solo) == 0 {
		k.mu.Unlock()
		return false
	}
	round := make(chan struct{})
	k.round = round
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.round = nil
		k.mu.Unlock()
		close(round)
	}()

	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	all := make([]*Lease, 0, len(batched)+len(solo))
	errs := make([]error, 0, len(batched)+len(solo))
	if len(batched) > 0 {
		hs := make([]Handle, len(batched))
		for i, l := range batched {
			hs[i] = unwrapHandle(l.h)
		}
		for i, err := range k.batchOrNil().Renew(ctx, hs) {
			l := batched[i]
			if errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrLost) && l.adopted {
				// The Batch cannot renew this handle: it goes to the pool,
				// now and from now on.
				l.solo = true
				solo = append(solo, l)
				continue
			}
			all, errs = append(all, l), append(errs, err)
		}
	}
	n := len(all)
	all, errs = append(all, solo...), append(errs, make([]error, len(solo))...)
	runPool(len(solo), func(i int) { errs[n+i] = solo[i].h.Extend(ctx, k.ttl) })

	k.mu.Lock()
	defer k.mu.Unlock()
	for i, l := range all {
		err := errs[i]
		l.mu.Lock()
		l.renewing = false
		gone := l.lost
		l.mu.Unlock()
		if gone {
			continue
		}
		switch {
		case err == nil:
			until := l.h.ValidUntil()
			l.mu.Lock()
			l.validUntil = until
			l.mu.Unlock()
			l.tel.Renewal("renewed")
		case errors.Is(err, ErrInvalidArgument):
			l.tel.Renewal("refused")
			l.lose("renewal", fmt.Errorf("%w (renewal refused: %w)", lost("the backend refused the renewal"), err))
			continue
		case errors.Is(err, ErrLost):
			l.tel.Renewal("lost")
			l.lose("renewal", fmt.Errorf("%w (renewal: %w)", lost("the backend no longer has the grant"), err))
			continue
		default:
			unknown = true
			l.tel.Renewal("unknown")
			k.cfg.logger().Debug("leasehold: renewal failed, retrying", "key", l.h.Key(), "valid_until", l.ValidUntil(), "err", err)
		}
	}
	// The expiry timer, for the earliest deadline of all live leases
	// (those added during the round included).
	var earliest time.Time
	for _, l := range k.leases {
		l.mu.Lock()
		gone, d := l.lost, l.validUntil.Add(-k.cfg.margin)
		l.mu.Unlock()
		if !gone && (earliest.IsZero() || d.Before(earliest)) {
			earliest = d
		}
	}
	k.expires = time.Time{}
	k.expiry.Stop()
	if !earliest.IsZero() {
		k.armLocked(earliest)
	}
	return unknown
}

// expire ends the leases whose validity (less the margin) has passed
// without a successful renewal, and sets the timer for the next deadline.
func (k *Keeper) expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	k.expires = time.Time{}
	var next time.Time
	for _, l := range k.leases {
		l.mu.Lock()
		gone, renewing, d := l.lost, l.renewing, l.validUntil.Add(-k.cfg.margin)
		l.mu.Unlock()
		if gone {
			continue
		}
		if d.After(now) {
			if next.IsZero() || d.Before(next) {
				next = d
			}
			continue
		}
		l.loseAtDeadline(renewing)
	}
	if !next.IsZero() {
		k.armLocked(next)
	}
}

// Wrapper is implemented by a Handle that wraps another (a
// semaphore.Permit): a Keeper renews the handle it wraps through the
// backend's Batch.
type Wrapper interface {
	Unwrap() Handle
}

// unwrapHandle is the handle h wraps, through every layer.
func unwrapHandle(h Handle) Handle {
	for {
		w, ok := h.(Wrapper)
		if !ok {
			return h
		}
		inner := w.Unwrap()
		if inner == nil {
			return h
		}
		h = inner
	}
}

// runPool runs fn(0..n-1) on at most keeperPool goroutines and waits.
func runPool(n int, fn func(i int)) {
	if n == 0 {
		return
	}
	var wg sync.WaitGroup
	work := make(chan int)
	for range min(n, keeperPool) {
		wg.Go(func() {
			for i := range work {
				fn(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// leaseSet is a Keeper's leases: a slice in which each lease knows its
// index, so that adding and removing one (10,000 a second for a
// scheduler's runs) costs no hashing. Its methods need the Keeper's mu.
type leaseSet []*Lease

func (s *leaseSet) add(l *Lease) {
	l.at = len(*s)
	*s = append(*s, l)
}

// remove takes l out, if it is in: the last lease takes its place.
func (s *leaseSet) remove(l *Lease) {
	ls := *s
	i := l.at
	if i < 0 || i >= len(ls) || ls[i] != l {
		return
	}
	last := len(ls) - 1
	ls[i] = ls[last]
	ls[i].at = i
	ls[last] = nil
	*s = ls[:last]
	l.at = -1
}
