package timers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/semaphore"
)

// DefaultShutdownTimeout bounds how long Run waits for running functions
// once its context ends.
const DefaultShutdownTimeout = 30 * time.Second

// Scheduler runs timers over a lock.Lock. Every host of a fleet runs the
// same timers on its own Scheduler; the lock makes each tick run once.
type Scheduler struct {
	l        lock.Lock
	set      *settings
	common   lock.Common
	lockOpts []lock.Option // what the helpers it calls are given
	m        *metrics

	lim      lock.Limits
	keepers  *keepers        // Run's
	pool     *pool           // Run's: the goroutines of instants and runs
	rq       *runQueues      // Run's: the runs of instants, in turn
	runCtx   context.Context // Run's: the runs' context (Run's, until the shutdown timeout)
	slotGate chan struct{}   // the slot calls in flight (takeSlots)

	mu      sync.Mutex
	timers  map[string]*entry
	order   []string
	running bool

	// For tests and benchmarks: how often the dispatcher woke up, how
	// many claim calls it made (ClaimEach calls, or single claims on a
	// backend that is not a lock.EachClaimer), and how many slot calls
	// (takeSlots).
	wakeups, claimCalls, slotCalls atomic.Int64
}

// SchedulerOption configures New.
type SchedulerOption func(*settings) error

type settings struct {
	clock    func() time.Time
	shutdown time.Duration
	common   lock.Common
}

// WithClock replaces the scheduler's wall clock, for tests (a clock offset
// simulates a host whose clock is off). Waiting still uses the runtime's
// timers, which are offset-free.
func WithClock(now func() time.Time) SchedulerOption {
	return func(s *settings) error {
		if now == nil {
			return errors.New("nil clock")
		}
		s.clock = now
		return nil
	}
}

// WithShutdownTimeout bounds how long Run waits for running functions after
// its context ends; then their contexts are cancelled (default 30 s, at
// most lock.MaxTTL).
func WithShutdownTimeout(d time.Duration) SchedulerOption {
	return func(s *settings) error {
		if d <= 0 || d > lock.MaxTTL {
			return fmt.Errorf("shutdown timeout %v must be positive and at most %v", d, lock.MaxTTL)
		}
		s.shutdown = d
		return nil
	}
}

// WithCommon sets where logs, metrics and spans go, and the owner shown as
// the runner in Status. A tick's claim and a run's slot are stored with
// the backend's owner, which Observe shows: an Owner that differs from the
// Lock's (lock.Owned) is refused, and one is used only with a Lock that
// states none. The timers' semaphores are given it whole.
func WithCommon(c lock.Common) SchedulerOption {
	return func(s *settings) error { s.common = s.common.Merge(c); return nil }
}

// New returns a scheduler over l. It fails, with an error that matches
// lock.ErrInvalidArgument, on a nil Lock or an invalid option.
func New(l lock.Lock, opts ...SchedulerOption) (*Scheduler, error) {
	if l == nil {
		return nil, backendkit.Invalid("timers", "nil Lock")
	}
	set := &settings{clock: time.Now, shutdown: DefaultShutdownTimeout}
	if err := backendkit.Apply("timers", set, opts); err != nil {
		return nil, err
	}
	c, err := backendkit.ResolveOn("timers", set.common, l)
	if err != nil {
		return nil, err
	}
	tel := backendkit.NewTelemetry(c)
	return &Scheduler{
		l: l, set: set, common: c, timers: map[string]*entry{}, lim: lock.LimitsOf(l), slotGate: make(chan struct{}, slotWorkers),
		lockOpts: []lock.Option{tel.HelperOption(c)}, m: newMetrics(tel),
	}, nil
}

// Add registers a timer. It reports every problem of the definition —
// a bad name, interval or spec, a schedule with no tick to come, a bad
// option or one outside the backend's limits (lock.LimitsOf), a duplicate
// name — before Run.
func (s *Scheduler) Add(t *Timer) error {
	if t == nil {
		return backendkit.Invalid("timers", "nil timer")
	}
	if t.err != nil {
		return t.err
	}
	if t.schedule == nil {
		return backendkit.Invalid("timers", "a Timer must be made by Every or Cron")
	}
	if err := checkName("timer name", t.name); err != nil {
		return err
	}
	if t.fn == nil {
		return backendkit.Invalid("timers", "timer %q: nil function", t.name)
	}
	if err := s.checkLimits(t); err != nil {
		return err
	}
	if now := s.set.clock(); !t.schedule.next(now).After(now) {
		return backendkit.Invalid("timers", "timer %q: the schedule has no tick after %v", t.name, now.Round(0))
	}
	sem, err := semaphore.New(s.l, namePrefix+t.name, t.maxConcurrency, semaphore.WithCommon(s.common), semaphore.WithoutSizeCheck())
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return backendkit.Invalid("timers", "timer %q: Add after Run", t.name)
	}
	if _, dup := s.timers[t.name]; dup {
		return backendkit.Invalid("timers", "a timer called %q is already registered", t.name)
	}
	e := &entry{t: t, s: s, sem: sem, prefix: namePrefix + t.name + "/tick/"}
	e.callFn = e.call
	if t.fallback > 0 {
		e.local = make(chan struct{}, t.fallback)
	}
	s.timers[t.name] = e
	s.order = append(s.order, t.name)
	return nil
}

// checkLimits checks t's options against the backend's limits.
func (s *Scheduler) checkLimits(t *Timer) error {
	lim := lock.LimitsOf(s.l)
	if t.leaseTTL > 0 {
		if err := lim.CheckTTL(t.leaseTTL); err != nil {
			return backendkit.Invalid("timers", "timer %q: WithTTL(%v): %w", t.name, t.leaseTTL, err)
		}
	}
	if t.misfire > lim.MaxTTL/2 {
		return fmt.Errorf("%w: timer %q: WithMisfireThreshold(%v) is above half this backend's maximum ttl %v (a tick's claim must outlive it)",
			lock.ErrInvalidArgument, t.name, t.misfire, lim.MaxTTL)
	}
	return nil
}

// Run schedules the registered timers until ctx ends, then waits for the
// running functions (at most the shutdown timeout, after which their
// contexts are cancelled) and returns once every slot is released.
func (s *Scheduler) Run(ctx context.Context) error {
	if ctx == nil {
		return backendkit.Invalid("timers", "nil context")
	}
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return backendkit.Invalid("timers", "Run called twice")
	}
	s.running = true
	entries := make([]*entry, 0, len(s.order))
	for _, name := range s.order {
		entries = append(entries, s.timers[name])
	}
	s.mu.Unlock()

	// Runs outlive ctx until the shutdown timeout: they get their own.
	runCtx, stopRuns := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopRuns(nil)
	s.runCtx = runCtx
	s.keepers = newKeepers(s.l, s.lockOpts)
	s.pool = newPool()
	defer s.pool.close() // after every run has returned
	s.rq = newRunQueues(s.pool)
	var runs sync.WaitGroup
	var checks sync.WaitGroup
	checks.Go(func() { s.checkSizes(ctx, entries) })
	s.dispatch(ctx, runCtx, &runs, entries)
	checks.Wait()
	done := make(chan struct{})
	go func() { runs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.set.shutdown):
		s.common.Logger.Warn("leasehold: timers still running at the shutdown timeout; cancelling them", "timeout", s.set.shutdown)
		stopRuns(errors.New("timers: shutdown timeout"))
		<-done
	}
	// Every run has released its slot: closing the Keepers releases
	// nothing, and ends their goroutines.
	closing, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.set.shutdown)
	defer cancel()
	s.keepers.close(closing)
	return nil
}

// keepers keep the runs' slot leases: one lock.Keeper per distinct lease
// ttl (WithTTL, or the interval between 2 s and 30 s), made when a run
// first needs it and closed when Run returns. A Keeper renews all its
// leases together, on one goroutine, through the backend's lock.Batch
// (a few round trips per renewal period, whatever the number of runs),
// instead of a renewal goroutine and round trip per run.
type keepers struct {
	l    lock.Lock
	opts []lock.Option // the scheduler's options of the lock helpers

	mu    sync.Mutex
	byTTL map[time.Duration]*lock.Keeper // nil: none can be made for that ttl
	all   []*lock.Keeper
	open  bool
}

func newKeepers(l lock.Lock, opts []lock.Option) *keepers {
	return &keepers{l: l, opts: opts, byTTL: map[time.Duration]*lock.Keeper{}, open: true}
}

// keeper is the Keeper of the slot leases of ttl, or nil if none can be
// made (lock.NewKeeper refused the ttl; or the keepers are closed): the
// lease is then kept on its own (lock.Hold).
func (k *keepers) keeper(ttl time.Duration) *lock.Keeper {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kp, ok := k.byTTL[ttl]; ok || !k.open {
		return kp
	}
	kp, err := lock.NewKeeper(k.l, ttl, k.opts...)
	if err != nil {
		kp = nil
	} else {
		k.all = append(k.all, kp)
	}
	k.byTTL[ttl] = kp
	return kp
}

// close closes every Keeper.
func (k *keepers) close(ctx context.Context) {
	k.mu.Lock()
	all := k.all
	k.all, k.byTTL, k.open = nil, nil, false
	k.mu.Unlock()
	for _, kp := range all {
		_ = kp.Close(ctx)
	}
}

// checkSizeInterval is how often the scheduler declares and checks the
// sizes of its timers' semaphores (semaphore.CheckSizes asks for 30 s at
// most: a declaration lasts a minute).
const checkSizeInterval = 30 * time.Second

// checkSizes declares the sizes of the timers' semaphores (their
// WithMaxConcurrency) and compares them with the other hosts', for all
// the timers at once (semaphore.CheckSizes: one lock.ClaimEach and one
// List), when Run starts and every checkSizeInterval until ctx ends. A
// timer whose hosts disagree skips its ticks (reason error) until they
// agree again.
func (s *Scheduler) checkSizes(ctx context.Context, entries []*entry) {
	sems := make([]*semaphore.Semaphore, len(entries))
	for i, e := range entries {
		sems[i] = e.sem
	}
	t := time.NewTicker(checkSizeInterval)
	defer t.Stop()
	for {
		for i, err := range semaphore.CheckSizes(ctx, s.l, namePrefix, sems) {
			entries[i].mu.Lock()
			entries[i].mismatch = err
			entries[i].mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// entry is a registered timer with its state.
type entry struct {
	t     *Timer
	s     *Scheduler
	sem   *semaphore.Semaphore
	local chan struct{} // the per-host cap of WithRunWhenUnavailable

	nextTick atomic.Int64                // the next tick in Unix nanoseconds, for Status (0: not known yet)
	prefix   string                      // the claim keys' prefix, "timer/<name>/tick/"
	callFn   func(context.Context) error // e.call, made once

	mu       sync.Mutex
	status   Status
	degraded atomic.Bool                            // the backend was last found unreachable
	mismatch error                                  // the last size check's (semaphore.ErrSizeMismatch)
	attrs    [2]map[string]metric.MeasurementOption // the metrics' attributes, by outcome and by reason
}

// claimKey is the key that makes tick at run once: whoever claims it
// (lock.Claim) runs the tick. The claim lapses after the interval plus the
// misfire threshold, when no host can still reach the tick; on a backend
// whose grants hold a connection (pglock) it holds none meanwhile.
// With WithRunsPerTick(n) a tick has n claims: claim i > 0 adds "/<i>".
func claimKey(name string, at time.Time, i int) string {
	return claimKeyAfter(namePrefix+name+"/tick/", at, i)
}

// claimKeyAfter is claimKey from its prefix ("timer/<name>/tick/").
func claimKeyAfter(prefix string, at time.Time, i int) string {
	var b strings.Builder
	b.Grow(len(prefix) + 26) // a 20-digit instant, "/" and a 4-digit claim
	b.WriteString(prefix)
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], at.UnixMilli(), 10))
	if i > 0 {
		b.WriteByte('/')
		b.Write(strconv.AppendInt(num[:0], int64(i), 10))
	}
	return b.String()
}

// claimKey is claimKey(e.t.name, at, i), from the prefix Add built.
func (e *entry) claimKey(at time.Time, i int) string { return claimKeyAfter(e.prefix, at, i) }

// stop ends a timer whose schedule has no tick after from: it logs an
// error, Status reports it in Stopped, and the dispatcher drops it.
func (e *entry) stop(from time.Time) {
	err := fmt.Errorf("timers: %q has no tick after %v: stopped", e.t.name, from)
	e.record(func(st *Status) { st.Stopped = err })
	e.s.common.Logger.Error("leasehold: timer stopped: its schedule has no next tick", "timer", e.t.name, "after", from)
}

// errOverran marks a run that was still going at WithMaxRunTime plus the
// grace, when the scheduler gave its slot up.
var errOverran = errors.New("timers: the run overran WithMaxRunTime plus the grace; its slot was released")

// overrunGrace is how long a run may go on past WithMaxRunTime before its
// slot is released: one renewal period of the slot lease (a third of its
// ttl), time for a function that heeds its context to return.
func overrunGrace(lease time.Duration) time.Duration { return lease / 3 }

// hold runs the tick on permit (runCtx carries the tick), renewing the slot lease while fn runs
// (lock.Hold), and releases it when fn returns. With WithMaxRunTime, a run
// that has not returned by then plus overrunGrace gives its slot up: the
// renewal stops and the slot is released while fn still runs (in a
// goroutine of its own), so that a function that ignores its context does
// not keep the timer's later ticks busy. hold still returns only when fn
// has, with an error that matches errOverran.
func (e *entry) hold(runCtx context.Context, permit *semaphore.Permit, ttl time.Duration, tick *Tick) error {
	kp := e.s.keepers.keeper(ttl)
	hold := func(fn func(context.Context) error) error {
		if kp != nil {
			return kp.Hold(runCtx, permit, fn)
		}
		return lock.Hold(runCtx, permit, ttl, fn, e.s.lockOpts...)
	}
	if e.t.maxRunTime == 0 {
		return hold(e.callFn)
	}
	fnDone := make(chan error, 1)
	overran := false
	err := hold(func(ctx context.Context) error {
		go func() { fnDone <- e.call(ctx) }()
		grace := overrunGrace(ttl)
		cut := time.NewTimer(e.t.maxRunTime + grace)
		defer cut.Stop()
		select {
		case err := <-fnDone:
			return err
		case <-cut.C:
			overran = true
			e.s.common.Logger.Warn("leasehold: timer run overran WithMaxRunTime and the grace: releasing its slot while it still runs",
				"timer", e.t.name, "tick", tick.At, "max_run_time", e.t.maxRunTime, "grace", grace)
			return errOverran
		}
	})
	if overran {
		return errors.Join(err, <-fnDone)
	}
	return err
}

// call runs fn within WithMaxRunTime, retrying as WithRetries says.
func (e *entry) call(ctx context.Context) error {
	if e.t.maxRunTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, e.t.maxRunTime, fmt.Errorf("%w: timers: %q ran past WithMaxRunTime %v", context.DeadlineExceeded, e.t.name, e.t.maxRunTime))
		defer cancel()
	}
	backoff := e.t.retryBackoff
	for attempt := 0; ; attempt++ {
		err := e.t.fn(ctx)
		if err == nil || attempt >= e.t.retries || ctx.Err() != nil {
			return err
		}
		e.s.common.Logger.Debug("leasehold: timer run failed, retrying", "timer", e.t.name, "attempt", attempt+1, "err", err)
		if backendkit.Sleep(ctx, backoff) != nil {
			return errors.Join(err, context.Cause(ctx))
		}
		backoff = min(backoff*2, lock.MaxTTL) // backoff <= lock.MaxTTL: no overflow
	}
}

// unavailable skips the tick, or with WithRunWhenUnavailable runs it under the
// per-host cap.
func (e *entry) unavailable(ctx, runCtx context.Context, runs *sync.WaitGroup, at time.Time, err error) {
	e.degraded.Store(true)
	if e.local == nil {
		e.skip(ctx, at, "unavailable", err.Error())
		return
	}
	select {
	case e.local <- struct{}{}:
	default:
		e.skip(ctx, at, "busy", "the per-host cap of WithRunWhenUnavailable is reached")
		return
	}
	e.s.common.Logger.Warn("leasehold: backend unreachable, running the tick under the per-host cap: the cluster-wide once-per-tick and concurrency guarantees are suspended",
		"timer", e.t.name, "tick", at, "per_host_cap", cap(e.local), "err", err)
	tick := Tick{Timer: e.t.name, At: at, Slot: -1, Local: true}
	e.s.pool.Go(runs, funcRunner(func() {
		defer func() { <-e.local }()
		start := e.s.set.clock()
		err := e.call(context.WithValue(runCtx, tickKey{}, &tick))
		e.finish(runCtx, tick, start, err)
	}))
}

// reachable notes that the backend answered: after an outage it says so,
// since the cluster-wide guarantees hold again from this tick on.
func (e *entry) reachable(at time.Time) {
	if e.degraded.Load() && e.degraded.Swap(false) {
		e.s.common.Logger.Warn("leasehold: backend reachable again: the cluster-wide once-per-tick and concurrency guarantees hold again",
			"timer", e.t.name, "tick", at)
	}
}

func (e *entry) skip(ctx context.Context, at time.Time, reason, detail string) {
	e.record(func(st *Status) {
		st.Skips++
		st.LastSkip = SkipInfo{Tick: at, Reason: reason}
	})
	if e.s.m.skips.Enabled(ctx) {
		e.s.m.skips.Add(context.WithoutCancel(ctx), 1, e.attributes("leasehold.reason", reason))
	}
	level := slog.LevelInfo
	if reason == "unavailable" || reason == "error" {
		level = slog.LevelWarn
	}
	e.s.common.Logger.Log(ctx, level, "leasehold: timer tick skipped", "timer", e.t.name, "tick", at, "reason", reason, "detail", detail)
}

// finish records a run that started at start, and returns when it ended.
func (e *entry) finish(ctx context.Context, tick Tick, start time.Time, err error) time.Time {
	end := e.s.set.clock()
	took := end.Sub(start)
	outcome := "ok"
	switch {
	case errors.Is(err, errOverran):
		outcome = "overran"
	case errors.Is(err, lock.ErrLost):
		outcome = "lost"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		outcome = "cancelled"
	case err != nil:
		outcome = "error"
	}
	e.mu.Lock()
	e.status.Runs++
	if err != nil {
		e.status.Failures++
	}
	e.status.LastRun = RunInfo{Tick: tick.At, Start: start, Duration: took, Outcome: outcome, Err: err, Runner: e.s.common.Owner, Local: tick.Local}
	e.mu.Unlock()
	// A measurement costs allocations even with no meter provider: none
	// is made then (10,000 runs a second).
	if runs, dur := e.s.m.runs.Enabled(ctx), e.s.m.duration.Enabled(ctx); runs || dur {
		attrs := e.attributes("leasehold.outcome", outcome)
		mctx := context.WithoutCancel(ctx)
		if runs {
			e.s.m.runs.Add(mctx, 1, attrs)
		}
		if dur {
			e.s.m.duration.Record(mctx, took.Seconds(), attrs)
		}
	}
	if err != nil {
		e.s.common.Logger.Warn("leasehold: timer run failed", "timer", e.t.name, "tick", tick.At, "outcome", outcome, "err", err)
	}
	return end
}

// attributes are the metrics' attributes of this timer with key (an
// outcome or a reason) set to value, built once: an attribute set costs
// allocations and hashing, even with no meter provider installed.
func (e *entry) attributes(key, value string) metric.MeasurementOption {
	i := 0
	if key != "leasehold.outcome" {
		i = 1
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	o, ok := e.attrs[i][value]
	if !ok {
		if e.attrs[i] == nil {
			e.attrs[i] = map[string]metric.MeasurementOption{}
		}
		o = metric.WithAttributes(attribute.String("leasehold.timer", e.t.name), attribute.String(key, value))
		e.attrs[i][value] = o
	}
	return o
}

type metrics struct {
	runs, skips metric.Int64Counter
	duration    metric.Float64Histogram
}

func newMetrics(tel *backendkit.Telemetry) *metrics {
	m := tel.Meter
	out := &metrics{}
	out.runs, _ = m.Int64Counter("leasehold.timer.runs", metric.WithDescription("Timer runs on this host, by outcome."))
	out.skips, _ = m.Int64Counter("leasehold.timer.skips", metric.WithDescription("Ticks this host skipped, by reason (busy, misfire, unavailable, error)."))
	out.duration, _ = m.Float64Histogram("leasehold.timer.run.duration", metric.WithUnit("s"), metric.WithDescription("Duration of timer runs."))
	return out
}
