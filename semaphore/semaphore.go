// Package semaphore is a global, slot-based counting semaphore over any
// lock.Lock: at most Size permits exist at any instant across every process
// that shares the backend, each permit is a grant on one of Size slot keys,
// and a crashed holder's slot frees within its ttl.
//
// # Which call
//
// Acquire waits for a slot and keeps it until Release (a Lease: renewed in
// the background, its Context ends if the slot is lost); Do does the same
// around a function. Both hold the slot however long the work takes. The
// permits of TryAcquire and AcquirePermit are not renewed: they lapse after
// their ttl, when another caller may take the slot while the first still
// works, unless the caller keeps them (lock.Keep, lock.Hold).
// TryAcquireEach is TryAcquire for many semaphores of one Lock at once,
// in one lock.TryAcquireAnyEach (on Redis one round trip for all of them,
// in scripts of at most 32 semaphores and 128 slots).
//
// # How it works
//
// A semaphore named n of size s owns the keys "sem/{n}/slot/0" to
// "sem/{n}/slot/<s-1>"; they share a hash tag so that they live in one Redis
// Cluster slot. On a backend with lock.MultiLock (all built-in ones),
// TryAcquire is one round trip whatever the number of slots held; otherwise
// it tries the slots one by one from a random start. Acquire waits for a
// release of any slot (notification-driven on backends with lock.Waiter),
// bounded by the shortest remaining ttl a failed attempt reported.
//
// A permit is a lock.Handle: it knows its slot number and its fencing token
// (per slot: a resource that checks tokens must keep the highest token per
// slot), it passes its grant's loss report on (lock.LossNotifier), and
// lock.Keep, lock.Hold and the rest work on it as on any grant.
//
// # Participants that disagree on the size
//
// Every participant declares its size under "sem/{n}/size/<s>" (a short
// grant, taken once per minute at most, never on the fast path) and, on
// backends with lock.Inspector, compares the sizes declared and the slots
// held with its own: on its first use, whenever it finds every slot busy,
// and in Occupancy. A disagreement makes those calls fail with
// ErrSizeMismatch and is logged at Warn. With WithoutSizeCheck a
// semaphore leaves both to its caller, which checks many semaphores at
// once with CheckSizes (one lock.ClaimEach of their declarations and one
// List). Between two checks, participants
// with different sizes do not exclude each other beyond the slots they
// share — fix the configuration.
//
// # Limits
//
// A name follows backendkit.CheckName (1 to lock.MaxNameLen bytes of
// UTF-8, no control characters, no braces): every slot key then fits in
// lock.MaxKeyLen. A size is 1 to MaxSize (4096). Both are checked by New.
// The ttl given to TryAcquire, Acquire and AcquirePermit, and Do's
// (WithTTL), is checked against the backend's limits (lock.LimitsOf). On a
// backend that takes fewer keys per TryAcquireAny than the size (a
// third-party one; every built-in backend takes MaxSize), an attempt tries
// the slots in batches of its MaxKeys, and a wait goes by backoff bounded
// by the slots' remaining ttl instead of one subscription for every slot.
//
// Sizes and slot numbers read back from a backend (Observe, ObserveAll,
// Occupancy, the size check) are untrusted: anything New could not have
// made (a size outside 1…MaxSize, a slot outside 0…MaxSize-1, a number
// that is not plain decimal) is ignored.
//
// # Options
//
// New takes this package's options: WithTTL (Do's ttl), WithBackoff (the
// retry delay of Acquire, AcquirePermit and Do where the backend sends no
// release notifications) and WithCommon (the logger, meter and tracer
// providers; a slot's owner is its backend's). A refused option is an
// error of New's that matches lock.ErrInvalidArgument.
package semaphore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// ErrSizeMismatch: participants of one semaphore were configured with
// different sizes.
var ErrSizeMismatch = errors.New("semaphore: participants disagree on the size")

// MaxSize is the largest number of slots: every slot key fits in one
// TryAcquireAny of any built-in backend (lock.MaxKeys).
const MaxSize = lock.MaxKeys

// declareEvery is how often a participant renews its size declaration.
const declareEvery = 30 * time.Second

// Semaphore is a global semaphore. It is safe for concurrent use.
type Semaphore struct {
	l      lock.Lock
	name   string
	size   int
	keys   []string
	ttl    time.Duration // Do's
	common lock.Common
	opts   []lock.Option // what the helpers it calls are given
	metric *metrics

	mu       sync.Mutex
	declared time.Time // when this instance last declared its size
	checked  bool      // whether the first-use check ran
	noCheck  bool      // WithoutSizeCheck: the caller checks (CheckSizes)
}

// Permit is a grant on one slot of a semaphore. It passes its grant's
// loss report on (Lost): lock.Keep and lock.Hold of a permit, and the
// leases of Acquire and Do, end as soon as the backend reports the slot
// gone, as they do on the grant itself.
type Permit struct {
	lock.Handle
	slot     int
	sem      *Semaphore
	released atomic.Bool // the slot stopped counting as held
	expiring atomic.Bool // a timer stops counting it at its ValidUntil
}

// Slot is the permit's slot number, in [0, Size).
func (p *Permit) Slot() int { return p.slot }

// Unwrap is the backend's grant of the slot (lock.Wrapper): a lock.Keeper
// renews it with the other grants of its batch.
func (p *Permit) Unwrap() lock.Handle { return p.Handle }

// Limits implements lock.Limited with the limits of the permit's grant, so
// that lock.Keep and lock.Hold check a ttl against the backend's.
func (p *Permit) Limits() lock.Limits { return lock.LimitsOf(p.Handle) }

// Lost implements lock.LossNotifier with the loss report of the slot's
// grant (memlock, pglock and etcdlock handles have one). For a grant
// without one it returns nil, a channel never closed: the loss is then
// found by renewal, as for that grant itself.
func (p *Permit) Lost() <-chan struct{} {
	if n, ok := p.Handle.(lock.LossNotifier); ok {
		return n.Lost()
	}
	return nil
}

// Release gives the slot back (see lock.Handle).
func (p *Permit) Release(ctx context.Context) error {
	return p.AfterRelease(ctx, p.Handle.Release(ctx))
}

// AfterRelease is what Release does once the slot's grant was released
// with outcome err (lock.AfterReleaser: lock.ReleaseEach releases permits
// together): the slot stops counting as held (the metric
// leasehold.semaphore.permits.held) at once when err is nil or matches
// lock.ErrLost. With any other outcome (unknown: the backend did not
// answer) the grant may be held until its ValidUntil, and nothing may
// release it again: the slot stops counting then, by a timer
// (time.AfterFunc, one at a time per permit, none when the metric is not
// recorded), unless a later Release that succeeds made it stop first. It
// returns err.
func (p *Permit) AfterRelease(ctx context.Context, err error) error {
	switch {
	case err == nil || errors.Is(err, lock.ErrLost):
		p.unhold(ctx)
	case p.sem.metric.held.Enabled(ctx) && p.expiring.CompareAndSwap(false, true):
		p.unholdAtExpiry(context.WithoutCancel(ctx))
	}
	return err
}

// unhold stops counting the slot as held, once.
func (p *Permit) unhold(ctx context.Context) {
	if p.released.CompareAndSwap(false, true) {
		p.sem.metric.addHeld(ctx, -1)
	}
}

// unholdAtExpiry stops counting the slot as held once the grant's
// ValidUntil has passed, read again when the timer fires: an Extend may
// have moved it meanwhile.
func (p *Permit) unholdAtExpiry(ctx context.Context) {
	if p.released.Load() {
		return
	}
	if d := time.Until(p.Handle.ValidUntil()); d > 0 {
		time.AfterFunc(d, func() { p.unholdAtExpiry(ctx) })
		return
	}
	p.unhold(ctx)
}

// Option configures New.
type Option func(*config) error

type config struct {
	ttl     time.Duration
	backoff []lock.Option
	common  lock.Common
	noCheck bool // WithoutSizeCheck
	keeper  *lock.Keeper
	ttlSet  bool
}

// WithTTL sets the ttl of Do (default lock.DefaultTTL); it is checked
// against the backend's limits on every call.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if err := lock.DefaultLimits.CheckTTL(ttl); err != nil {
			return err
		}
		c.ttl, c.ttlSet = ttl, true
		return nil
	}
}

// WithBackoff bounds the retry delay of Acquire, AcquirePermit and Do
// where the backend sends no release notifications, as lock.WithBackoff
// does lock.Acquire's.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) error {
		if min <= 0 || max <= 0 || max < min {
			return fmt.Errorf("backoff bounds %v, %v must be positive, min first", min, max)
		}
		c.backoff = []lock.Option{lock.WithBackoff(min, max)}
		return nil
	}
}

// WithKeeper keeps the permits of Acquire and Do alive through k (a
// lock.Keeper over the same Lock) instead of a renewal goroutine each: for
// a process that holds many permits at once. Their ttl must be k's (Do's
// is WithTTL's; New refuses a WithTTL that differs).
func WithKeeper(k *lock.Keeper) Option {
	return func(c *config) error {
		if k == nil {
			return errors.New("nil Keeper")
		}
		c.keeper = k
		return nil
	}
}

// WithCommon sets where logs, metrics and spans go (lock.Common). A slot's
// owner is the one its grant is stored with, the backend's: an Owner that
// differs from the Lock's (lock.Owned) is refused.
func WithCommon(c lock.Common) Option {
	return func(cfg *config) error { cfg.common = cfg.common.Merge(c); return nil }
}

// WithoutSizeCheck leaves the size declaration and the size check (see
// "Participants that disagree on the size") to the caller: TryAcquire,
// AcquirePermit, Acquire and Do then make neither (Occupancy still does),
// and the caller runs CheckSizes for all its semaphores at once, at least
// every 30 s (a declaration lasts a minute). It is for a process with many
// semaphores: timers, whose scheduler has one per timer, would otherwise
// list the backend once per timer when it starts.
func WithoutSizeCheck() Option {
	return func(c *config) error { c.noCheck = true; return nil }
}

// New returns the semaphore called name with size slots over l. The name
// follows backendkit.CheckName (1 to lock.MaxNameLen bytes of UTF-8, no control
// characters, no braces); size is 1 to MaxSize. Both are checked here,
// with an error that matches lock.ErrInvalidArgument.
func New(l lock.Lock, name string, size int, opts ...Option) (*Semaphore, error) {
	if l == nil {
		return nil, backendkit.Invalid("semaphore", "nil Lock")
	}
	if err := backendkit.CheckName("semaphore name", name); err != nil {
		return nil, backendkit.Invalid("semaphore", "%w", err)
	}
	if size < 1 || size > MaxSize {
		return nil, backendkit.Invalid("semaphore", "size %d must be in [1, %d]", size, MaxSize)
	}
	cfg := config{ttl: lock.DefaultTTL}
	if err := backendkit.Apply("semaphore", &cfg, opts); err != nil {
		return nil, err
	}
	c, err := backendkit.ResolveOn("semaphore", cfg.common, l)
	if err != nil {
		return nil, err
	}
	tel := backendkit.NewTelemetry(c)
	s := &Semaphore{l: l, name: name, size: size, ttl: cfg.ttl, common: c, metric: newMetrics(tel, name), checked: cfg.noCheck, noCheck: cfg.noCheck}
	s.opts = append([]lock.Option{tel.HelperOption(c)}, cfg.backoff...)
	if cfg.keeper != nil {
		if cfg.ttlSet && cfg.ttl != cfg.keeper.TTL() {
			return nil, backendkit.Invalid("semaphore", "WithTTL(%v) differs from the Keeper's ttl %v", cfg.ttl, cfg.keeper.TTL())
		}
		s.ttl = cfg.keeper.TTL()
		s.opts = append(s.opts, lock.WithKeeper(cfg.keeper))
	}
	s.keys = make([]string, size)
	for i := range s.keys {
		s.keys[i] = SlotKey(name, i)
	}
	return s, nil
}

// SlotKey is the lock key of slot i of the semaphore called name.
func SlotKey(name string, i int) string { return "sem/{" + name + "}/slot/" + strconv.Itoa(i) }

func sizeKey(name string, size int) string { return "sem/{" + name + "}/size/" + strconv.Itoa(size) }

// Name is the semaphore's name, as given to New.
func (s *Semaphore) Name() string { return s.name }

// Size is the number of slots this participant was configured with: at
// most Size permits exist at once among participants that agree on it
// (those that do not are told so with ErrSizeMismatch).
func (s *Semaphore) Size() int { return s.size }

// TryAcquire takes a free slot for ttl, or returns lock.ErrNotAcquired when
// all are held (counted as a rejection).
//
// The permit is not renewed: it lapses after ttl, and another caller may
// then take the slot while this one still works. Finish within ttl, or
// keep the permit alive with lock.Keep(ctx, p, ttl) (and release the
// lock.Lease it returns) or lock.Hold(ctx, p, ttl, fn).
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	if err := backendkit.Validate(ctx, s.keys[0], ttl, lock.LimitsOf(s.l)); err != nil {
		return nil, err
	}
	if err := s.firstUse(ctx); err != nil {
		return nil, err
	}
	p, err := s.try(ctx, ttl)
	if errors.Is(err, lock.ErrNotAcquired) {
		s.metric.reject(ctx)
		if s.noCheck {
			return nil, err
		}
		if cerr := s.check(ctx); cerr != nil {
			return nil, cerr
		}
	}
	return p, err
}

// Lease is a permit kept alive by renewal until Release: what Acquire
// returns. Its Context carries the slot's fencing token (lock.TokenFrom)
// and ends, with a cause that matches lock.ErrLost, as soon as the slot can
// no longer be trusted; Handle is the *Permit.
type Lease struct {
	*lock.Lease
	slot int
}

// Slot is the lease's slot number, in [0, Size).
func (l *Lease) Slot() int { return l.slot }

// Acquire waits until it holds a slot, or ctx ends, and keeps the slot
// until Release: the permit is renewed every ttl/3 in the background, so
// the work may take as long as it needs; ttl only bounds how long the slot
// stays taken after this process dies. Any slot's release wakes the wait.
//
// The caller must:
//
//   - call Release when done (defer it): it stops the renewal and gives
//     the slot back; it returns lock.ErrLost if the slot was lost meanwhile;
//   - stop working when the lease's Context ends with a cause matching
//     lock.ErrLost: the slot could not be renewed in time (the backend
//     unreachable for most of a ttl) and another caller may hold it now.
//
// The Context is a child of ctx: it ends with ctx too, while the renewal
// goes on until Release. Do does all of this around a function;
// AcquirePermit is the wait without the renewal.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration) (*Lease, error) {
	if err := checkRenewable(ttl); err != nil {
		return nil, err
	}
	p, err := s.AcquirePermit(ctx, ttl)
	if err != nil {
		return nil, err
	}
	l, err := lock.Keep(ctx, p, ttl, s.opts...)
	if err != nil {
		_ = p.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Lease{Lease: l, slot: p.slot}, nil
}

// checkRenewable refuses, before any slot is taken, a ttl that lock.Keep
// would refuse: one whose renewal interval (ttl/3) is below
// lock.MinRenewInterval.
func checkRenewable(ttl time.Duration) error {
	if ttl > 0 && ttl/3 < lock.MinRenewInterval {
		return backendkit.Invalid("semaphore", "%w: %v is too short to renew, at least %v", lock.ErrInvalidTTL, ttl, 3*lock.MinRenewInterval)
	}
	return nil
}

// AcquirePermit is Acquire without the renewal: it waits until it holds a
// slot for ttl or ctx ends. The permit lapses after ttl, and another caller
// may then take the slot while this one still works: finish within ttl, or
// keep the permit alive with lock.Keep(ctx, p, ttl) (and release the
// lock.Lease it returns) or lock.Hold(ctx, p, ttl, fn). Acquire and Do do
// that for you.
func (s *Semaphore) AcquirePermit(ctx context.Context, ttl time.Duration) (*Permit, error) {
	if err := backendkit.Validate(ctx, s.keys[0], ttl, lock.LimitsOf(s.l)); err != nil {
		return nil, err
	}
	if err := s.firstUse(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	checks := 0
	// One subscription covers every slot when the backend takes that many
	// keys in one call; otherwise the wait falls back to backoff, bounded
	// by the slots' remaining ttl.
	var waitOn lock.Lock = s.l
	if s.size > lock.LimitsOf(s.l).MaxKeys {
		waitOn = lockOnly{s.l}
	}
	h, err := backendkit.AcquireWith(ctx, waitOn, s.keys, func(ctx context.Context) (lock.Handle, error) {
		p, err := s.try(ctx, ttl)
		if errors.Is(err, lock.ErrNotAcquired) && checks < 1 && !s.noCheck {
			checks++ // check once per wait: a mismatch makes the wait pointless
			if cerr := s.check(ctx); cerr != nil {
				return nil, cerr
			}
		}
		return p, err
	}, s.opts...)
	if s.metric.wait.Enabled(ctx) {
		s.metric.wait.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), s.metric.attrs)
	}
	if err != nil {
		return nil, err
	}
	return h.(*Permit), nil
}

// Do runs fn while holding a permit: Acquire, lock.Hold (renewal, loss
// signal, token in fn's context), release. The ttl is WithTTL's (default
// lock.DefaultTTL, 30 s), given to New.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return backendkit.Invalid("semaphore", "nil function")
	}
	p, err := s.AcquirePermit(ctx, s.ttl)
	if err != nil {
		return err
	}
	return lock.Hold(ctx, p, s.ttl, fn, s.opts...)
}

// lockOnly hides a Lock's optional capabilities.
type lockOnly struct{ lock.Lock }

// try makes one attempt: one round trip with MultiLock (one per
// lock.LimitsOf(l).MaxKeys slots when the backend takes fewer keys per
// call than there are slots), else the slots in turn from a random start.
func (s *Semaphore) try(ctx context.Context, ttl time.Duration) (*Permit, error) {
	var h lock.Handle
	var err error
	if m, ok := s.l.(lock.MultiLock); ok {
		h, err = s.tryAny(ctx, m, ttl)
	} else {
		h, err = s.tryInTurn(ctx, ttl)
	}
	if err != nil {
		return nil, err
	}
	return s.permit(ctx, h)
}

// tryAny takes a free slot with TryAcquireAny: in one call, or in batches
// of the backend's MaxKeys slots from a random batch on.
func (s *Semaphore) tryAny(ctx context.Context, m lock.MultiLock, ttl time.Duration) (lock.Handle, error) {
	per := lock.LimitsOf(s.l).MaxKeys
	if s.size <= per {
		return m.TryAcquireAny(ctx, s.keys, ttl)
	}
	return s.firstOf((s.size+per-1)/per, func(b int) (lock.Handle, error) {
		return m.TryAcquireAny(ctx, s.keys[b*per:min((b+1)*per, s.size)], ttl)
	})
}

func (s *Semaphore) tryInTurn(ctx context.Context, ttl time.Duration) (lock.Handle, error) {
	return s.firstOf(s.size, func(i int) (lock.Handle, error) {
		return s.l.TryAcquire(ctx, s.keys[i], ttl)
	})
}

// firstOf makes attempts 0 to n-1 from a random one on, until one grants a
// slot or fails otherwise than with ErrNotAcquired; when every one finds
// its slots held, the error carries the shortest remaining ttl reported.
func (s *Semaphore) firstOf(n int, try func(i int) (lock.Handle, error)) (lock.Handle, error) {
	off := rand.N(n)
	var shortest time.Duration
	for i := range n {
		h, err := try((off + i) % n)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			return nil, err
		}
		if r := lock.RemainingTTL(err); r > 0 && (shortest == 0 || r < shortest) {
			shortest = r
		}
	}
	return nil, backendkit.NotAcquired(SlotKey(s.name, 0)+"…", shortest)
}

func (s *Semaphore) slotOf(key string) (int, bool) {
	if len(s.keys) <= 8 { // most semaphores: a look at each key, no parse
		for i, k := range s.keys {
			if k == key {
				return i, true
			}
		}
		return 0, false
	}
	name, kind, i, ok := parseKey(key)
	return i, ok && name == s.name && kind == "slot" && i < s.size
}

// firstUse declares the size and checks it against the others once.
func (s *Semaphore) firstUse(ctx context.Context) error {
	s.mu.Lock()
	checked := s.checked
	s.mu.Unlock()
	if checked {
		return nil
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.checked = true
	s.mu.Unlock()
	return nil
}

// declare renews this participant's size declaration when it is due.
func (s *Semaphore) declare(ctx context.Context) {
	s.mu.Lock()
	due := s.declared.IsZero() || time.Since(s.declared) >= declareEvery
	if due {
		s.declared = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	// Claimed by a participant of the same size already: that declares it
	// too. A claim lapses by itself and, on pglock, holds no connection.
	_, _ = lock.Claim(ctx, s.l, sizeKey(s.name, s.size), 2*declareEvery)
}

// check declares the size and, on backends with an Inspector, compares it
// with the sizes declared and the slots held by the others.
func (s *Semaphore) check(ctx context.Context) error {
	s.declare(ctx)
	in, ok := s.l.(lock.Inspector)
	if !ok {
		return nil
	}
	grants, err := in.List(ctx, "sem/{"+s.name+"}/")
	if err != nil {
		return nil // a listing failure must not block acquisition
	}
	return s.compare(grants)
}

// CheckSizes declares the sizes of sems, semaphores over l whose names
// start with prefix, in one lock.ClaimEach call, and on a backend with
// lock.Inspector compares each one's size with the sizes declared and the
// slots held by the others, from one List of every semaphore under
// prefix: what each semaphore does on its own at its first use, for a
// caller of WithoutSizeCheck. It returns one error per semaphore, in
// order: nil, or one that matches ErrSizeMismatch (logged at Warn), or
// lock.ErrInvalidArgument for a nil Semaphore or a name without the
// prefix (the others are checked all the same). A declaration or
// a listing that fails is not reported: it must not block acquisition.
func CheckSizes(ctx context.Context, l lock.Lock, prefix string, sems []*Semaphore) []error {
	errs := make([]error, len(sems))
	reqs := make([]lock.ClaimRequest, 0, len(sems))
	now := time.Now()
	for i, s := range sems {
		if s == nil {
			errs[i] = backendkit.Invalid("semaphore", "CheckSizes: nil Semaphore")
			continue
		}
		if !strings.HasPrefix(s.name, prefix) {
			errs[i] = backendkit.Invalid("semaphore", "CheckSizes: %q does not start with the prefix %q", s.name, prefix)
			continue
		}
		reqs = append(reqs, lock.ClaimRequest{Key: sizeKey(s.name, s.size), TTL: 2 * declareEvery})
		s.mu.Lock()
		s.declared = now
		s.mu.Unlock()
	}
	lock.ClaimEach(ctx, l, reqs)
	in, ok := l.(lock.Inspector)
	if !ok {
		return errs
	}
	grants, err := in.List(ctx, "sem/{"+prefix)
	if err != nil {
		return errs
	}
	byName := map[string][]lock.Grant{}
	for _, g := range grants {
		if name, _, _, ok := parseKey(g.Key); ok {
			byName[name] = append(byName[name], g)
		}
	}
	for i, s := range sems {
		if errs[i] == nil {
			errs[i] = s.compare(byName[s.name])
		}
	}
	return errs
}

// compare checks the sizes declared and the slots held in grants (of this
// semaphore's keys) against this participant's size.
func (s *Semaphore) compare(grants []lock.Grant) error {
	for _, g := range grants {
		name, kind, other, ok := parseKey(g.Key)
		if !ok || name != s.name {
			continue
		}
		if kind == "slot" {
			other++ // slot i needs at least i+1 slots
		}
		if (kind == "slot" && other <= s.size) || (kind == "size" && other == s.size) {
			continue
		}
		err := fmt.Errorf("%w: %q has size %d here, but %s uses %s (at least %d slots)", ErrSizeMismatch, s.name, s.size, g.Owner, g.Key, other)
		s.common.Logger.Warn("leasehold: semaphore size mismatch", "semaphore", s.name, "size", s.size, "other_owner", g.Owner, "other_key", g.Key)
		return err
	}
	return nil
}

// SlotState is one slot as Occupancy reports it.
type SlotState struct {
	Slot  int
	Held  bool
	Grant lock.Grant // the holder, when Held
}

// Occupancy reports who holds which slot (it needs a backend with
// lock.Inspector) and checks the size agreement.
func (s *Semaphore) Occupancy(ctx context.Context) ([]SlotState, error) {
	in, ok := s.l.(lock.Inspector)
	if !ok {
		return nil, backendkit.Invalid("semaphore", "the backend %T cannot list its grants", s.l)
	}
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	grants, err := in.List(ctx, "sem/{"+s.name+"}/slot/")
	if err != nil {
		return nil, err
	}
	out := make([]SlotState, s.size)
	for i := range out {
		out[i].Slot = i
	}
	for _, g := range grants {
		if i, ok := s.slotOf(g.Key); ok {
			out[i] = SlotState{Slot: i, Held: true, Grant: g}
		}
	}
	return out, s.check(ctx)
}

type metrics struct {
	*instruments
	attrs metric.MeasurementOption
}

// instruments are the semaphores' instruments of one Meter.
type instruments struct {
	meter      metric.Meter
	held       metric.Int64UpDownCounter
	wait       metric.Float64Histogram
	rejections metric.Int64Counter
}

// lastInstruments are the instruments of the Meter the last semaphore was
// made with, which the next ones most likely share (the global one): a
// semaphore of that Meter takes them rather than make its own (10,000
// semaphores made 10,000 sets of instruments, and a run read its own).
var lastInstruments atomic.Pointer[instruments]

// instrumentsOf returns m's instruments: the last ones when m is their
// Meter (a comparable value), else new ones.
func instrumentsOf(m metric.Meter) *instruments {
	comparable := reflect.ValueOf(m).Comparable()
	if last := lastInstruments.Load(); comparable && last != nil && same(last.meter, m) {
		return last
	}
	in := &instruments{meter: m}
	in.held, _ = m.Int64UpDownCounter("leasehold.semaphore.permits.held",
		metric.WithDescription("Permits held by this process (occupancy)."))
	in.wait, _ = m.Float64Histogram("leasehold.semaphore.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time Acquire waited for a permit."))
	in.rejections, _ = m.Int64Counter("leasehold.semaphore.rejections",
		metric.WithDescription("TryAcquire calls that found every slot busy."))
	if comparable {
		lastInstruments.Store(in)
	}
	return in
}

// addHeld counts n more permits held (n < 0: fewer). Each measurement
// costs allocations (its context, its options) even with no meter
// provider installed, so none is made then: a scheduler takes and
// releases 10,000 permits a second.
func (m *metrics) addHeld(ctx context.Context, n int64) {
	if m.held.Enabled(ctx) {
		m.held.Add(context.WithoutCancel(ctx), n, m.attrs)
	}
}

// reject counts a TryAcquire that found every slot busy.
func (m *metrics) reject(ctx context.Context) {
	if m.rejections.Enabled(ctx) {
		m.rejections.Add(context.WithoutCancel(ctx), 1, m.attrs)
	}
}

func newMetrics(tel *backendkit.Telemetry, name string) *metrics {
	set := metric.WithAttributeSet(attribute.NewSet(attribute.String("leasehold.semaphore", name)))
	return &metrics{instruments: instrumentsOf(tel.Meter), attrs: set}
}

// same reports whether a == b, without the panic of == on values that are
// not comparable: of a type that is not (a map, a slice, a func), or of a
// comparable type that holds one (a struct whose interface field holds a
// map). Such a value is the same as nothing.
func same(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.IsValid() && vb.IsValid() && va.Type() == vb.Type() && va.Comparable() && vb.Comparable() && a == b
}
