package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Defaults: a crashed worker's jobs are requeued about DefaultTTL +
// DefaultScanInterval = 20 s after its last heartbeat. The heartbeat and
// scan intervals that are not set follow the ttl (WithTTL): a heartbeat
// every ttl/4, a scan every ttl/3 (DefaultHeartbeatInterval and
// DefaultScanInterval are those of DefaultTTL).
const (
	DefaultTTL               = 15 * time.Second
	DefaultHeartbeatInterval = DefaultTTL / 4
	DefaultScanInterval      = DefaultTTL / 3
	DefaultMaxRetries        = 5
	DefaultRetryBackoffBase  = time.Second
	DefaultRetryBackoffCap   = 5 * time.Minute
	DefaultScanBatch         = 1000
)

// Requeue puts a recovered job back on the user's queue, to run after
// delay (exponential backoff over the job's Attempt: WithRetryBackoff,
// WithRetryJitter). It
// must be safe to call twice for one recovery: a recoverer that crashes
// after Requeue and before the entry is removed requeues it again.
type Requeue func(ctx context.Context, job Job, delay time.Duration) error

// Step names a point of the recovery of one job, for OnStep.
type Step string

const (
	StepReclaimed Step = "reclaimed" // the entry has a new epoch and Attempt+1
	StepRequeued  Step = "requeued"  // Requeue returned nil
	StepRemoved   Step = "removed"   // the entry is gone: recovery complete
	StepBuried    Step = "buried"    // moved to the dead set after MaxRetries
)

// Option configures NewRunner.
type Option func(*settings) error

type settings struct {
	ttl, heartbeat, scan time.Duration
	maxRetries           int
	base, cap            time.Duration
	jitter               float64
	batch                int
	recoverers           int
	election             string
	onDead               func(context.Context, DeadJob)
	onStep               func(Step, Job)
	common               lock.Common
}

// MaxScanBatch is the most expired jobs one scan reads (WithScanBatch), so
// that no listing call does unbounded work on the server.
const MaxScanBatch = 10000

// MaxRecoveryConcurrency is the most recoveries one scan runs at once
// (WithRecoveryConcurrency).
const MaxRecoveryConcurrency = 64

// interval checks the period of a loop that makes a registry call each
// time: at least a millisecond (the registries' resolution; below it the
// loop would hammer the server) and at most lock.MaxTTL, so that no
// conversion or sum of it overflows.
func interval(what string, d time.Duration) error {
	if d < time.Millisecond || d > lock.MaxTTL {
		return fmt.Errorf("%s %v is outside [1ms, %v]", what, d, lock.MaxTTL)
	}
	return nil
}

// WithTTL sets how long a job stays owned without a heartbeat (default
// DefaultTTL): more than 5.05 ms, so that three 1 ms heartbeats fit in
// what the drift allowance leaves of it (a job's context lives
// ttl − backendkit.DriftAllowance(ttl), ttl/100 + 2 ms, from before its
// last successful Track or heartbeat), at most lock.MaxTTL and the
// election lock's MaxTTL (it is also the recovery election's ttl); else
// NewRunner returns an error matching lock.ErrInvalidTTL. The heartbeat
// and scan intervals follow it unless they are set: ttl/4 (for ttls up to
// about 8.3 ms, a quarter of what the drift allowance leaves of it, at
// least 1 ms) and ttl/3.
func WithTTL(d time.Duration) Option {
	return func(s *settings) error { s.ttl = d; return nil }
}

// WithHeartbeatInterval sets the period of the one batched heartbeat a
// process sends for all its jobs (default: a quarter of the ttl, see
// WithTTL): at least 1 ms, and below a third of the ttl less its drift
// allowance, backendkit.DriftAllowance (ttl/100 + 2 ms): a job's context
// lives that long after a heartbeat, and three must fit in it. Under the
// default ttl, 15 s, that is below 4.949 s.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(s *settings) error { s.heartbeat = d; return interval("heartbeat interval", d) }
}

// WithScanInterval sets how often the recoverer looks for expired jobs
// (default: a third of the ttl; 1 ms to lock.MaxTTL).
func WithScanInterval(d time.Duration) Option {
	return func(s *settings) error { s.scan = d; return interval("scan interval", d) }
}

// WithMaxRetries sets how many recoveries a job gets before the dead set:
// 0 to MaxAttempt (default DefaultMaxRetries). A job's own Job.MaxRetries,
// when not 0, overrides it for that job.
func WithMaxRetries(n int) Option {
	return func(s *settings) error {
		if n < 0 || n > MaxAttempt {
			return fmt.Errorf("max retries %d is outside 0..%d", n, MaxAttempt)
		}
		s.maxRetries = n
		return nil
	}
}

// WithRetryBackoff sets the schedule of the delay before a recovered job
// is requeued: base·2^(attempt−1), capped at cap (defaults
// DefaultRetryBackoffBase, DefaultRetryBackoffCap); 0 ≤ base ≤ cap ≤
// lock.MaxTTL. The delay is drawn below that schedule as WithRetryJitter
// says: by default full jitter, uniform in [0, schedule].
func WithRetryBackoff(base, cap time.Duration) Option {
	return func(s *settings) error {
		if base < 0 || cap < base || cap > lock.MaxTTL {
			return fmt.Errorf("retry backoff base %v, cap %v: want 0 ≤ base ≤ cap ≤ %v", base, cap, lock.MaxTTL)
		}
		s.base, s.cap = base, cap
		return nil
	}
}

// WithRetryJitter sets how far below the backoff schedule (WithRetryBackoff)
// a delay may fall, as a fraction f of it, 0 ≤ f ≤ 1: the delay is uniform
// in [(1−f)·d, d] for the schedule's d = min(base·2^(attempt−1), cap).
// 1, the default, is full jitter (uniform in [0, d]: spreads a burst of
// recoveries best, but an early retry may come almost at once); 0 is the
// exact exponential schedule; 0.2 keeps every delay within 20 % below it.
func WithRetryJitter(f float64) Option {
	return func(s *settings) error {
		if !(f >= 0 && f <= 1) {
			return fmt.Errorf("retry jitter %v is outside [0, 1]", f)
		}
		s.jitter = f
		return nil
	}
}

// WithScanBatch sets how many expired jobs one scan handles at most: 1 to
// MaxScanBatch.
func WithScanBatch(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > MaxScanBatch {
			return fmt.Errorf("scan batch %d is outside 1..%d", n, MaxScanBatch)
		}
		s.batch = n
		return nil
	}
}

// WithRecoveryConcurrency sets how many of a scan's expired jobs are
// recovered at once, 1 to MaxRecoveryConcurrency (default 1: one after
// another). Over a BatchRecoverer (memjobs, redisjobs, pgjobs) a scan
// reclaims and removes its jobs in chunks, two round trips a chunk of
// RecoveryChunk, and the count bounds the Requeue (or Bury) calls of a
// chunk at once: Requeue is then most of a scan's time. Over a registry
// that is none, each recovery is three registry calls in turn (reclaim, then
// bury or requeue, then remove), each bounded to one job, so a scan that
// finds n expired jobs takes about 3·n round trips of wall time one at a
// time, and about 3·n/c with c at once: the calls of c recoveries overlap
// on c of the client's connections. The calls stay one job each, so none
// holds the server longer. On PostgreSQL the pool's size bounds the
// calls at once (pgxpool's default: 4, or the number of cores when more).
// BenchmarkScanRecovery, 1,000 expired jobs one at a time (the
// registry's BatchRecoverer hidden), 1 then 8 at once: with the server's
// replies 1 ms late, 2.4 s → 0.37 s on Redis and 2.6 s → 0.86 s on
// PostgreSQL (a pool of 4); on loopback, where CPU rather than the round
// trips bounds it, 137 → 50 ms and 327 → 174 ms. In chunks (a
// BatchRecoverer): 50 ms and 0.19 s with replies 1 ms late, 27 ms and
// 148 ms on loopback, whatever the count.
//
// With c above 1, Requeue, OnStep and OnDead are called from up to c
// goroutines at once, in no set order, and must be safe for that. Each
// job's own steps stay in order (reclaimed, then requeued or buried, then
// removed), and a scan still returns only when every recovery it started
// has ended.
func WithRecoveryConcurrency(c int) Option {
	return func(s *settings) error {
		if c < 1 || c > MaxRecoveryConcurrency {
			return fmt.Errorf("recovery concurrency %d is outside 1..%d", c, MaxRecoveryConcurrency)
		}
		s.recoverers = c
		return nil
	}
}

// WithElection names the leader election that gates recovery (default
// "jobs-recovery"); runners of one registry must share it. NewRunner
// checks it with backendkit.CheckName (the rule for election names).
func WithElection(name string) Option {
	return func(s *settings) error { s.election = name; return nil }
}

// OnDead runs after a job was moved to the dead set.
func OnDead(f func(context.Context, DeadJob)) Option {
	return func(s *settings) error { s.onDead = f; return nil }
}

// OnStep runs after each step of a recovery: for tracing, and for fault
// tests that stop a recoverer between two steps.
func OnStep(f func(Step, Job)) Option {
	return func(s *settings) error { s.onStep = f; return nil }
}

// WithCommon sets the runner's owner identity, recorded with its jobs and
// as the recoverer of the jobs it recovers (default: the Lock's,
// backendkit.OwnerOf), and where logs, metrics and spans go; its recovery
// election is given them too.
func WithCommon(c lock.Common) Option {
	return func(s *settings) error { s.common = s.common.Merge(c); return nil }
}

// Runner tracks the jobs of one worker process and, while it leads the
// recovery election, recovers the jobs of crashed workers.
type Runner struct {
	reg     Registry
	l       lock.Lock
	requeue Requeue
	s       *settings
	common  lock.Common
	m       *metrics

	electionCommon lock.Common // common less the owner: leader.Run's

	mu       sync.Mutex
	inflight map[string]*inflight
	beats    *beats // the heartbeat loop, while jobs are in flight; else nil
}

// beats is one run of the heartbeat loop: Track starts it when the first
// job comes in flight, and it ends when none is left.
type beats struct {
	ctx     context.Context // cancelled when the last job leaves: ends the loop and its call
	stop    context.CancelFunc
	stopped chan struct{} // closed when the loop has returned
	wake    chan struct{} // (buffered 1) a job came in flight: re-arm the deadline
}

type inflight struct {
	ref        Ref
	cancel     context.CancelCauseFunc
	validUntil time.Time
}

// NewRunner returns a runner over reg, electing its recoverer on l. It
// fails, with an error that matches lock.ErrInvalidArgument, on a nil
// argument or an invalid option.
func NewRunner(reg Registry, l lock.Lock, requeue Requeue, opts ...Option) (*Runner, error) {
	s := &settings{ttl: DefaultTTL,
		maxRetries: DefaultMaxRetries, base: DefaultRetryBackoffBase, cap: DefaultRetryBackoffCap, jitter: 1,
		batch: DefaultScanBatch, recoverers: 1, election: "jobs-recovery"}
	if err := backendkit.Apply("jobs", s, opts); err != nil {
		return nil, err
	}
	// Intervals not set follow the ttl (at least the 1 ms a registry
	// resolves); the heartbeat's a quarter of the ttl, or of what the
	// drift allowance leaves of it when that quarter would not fit three
	// times in it (ttls up to about 8.3 ms).
	if s.heartbeat == 0 {
		s.heartbeat = defaultHeartbeat(s.ttl)
	}
	if s.scan == 0 {
		s.scan = max(s.ttl/3, time.Millisecond)
	}
	if reg == nil || l == nil || requeue == nil {
		return nil, backendkit.Invalid("jobs", "nil registry, lock or requeue function")
	}
	// The ttl is the registry's and the election's: within both limits.
	if err := leaseLimits.CheckTTL(s.ttl); err != nil {
		return nil, backendkit.Invalid("jobs", "WithTTL: %w", err)
	}
	if err := lock.LimitsOf(l).CheckTTL(s.ttl); err != nil {
		return nil, backendkit.Invalid("jobs", "WithTTL (the election lock's limits): %w", err)
	}
	// A job's context lives its ttl less the drift allowance from before
	// Track (backendkit.ValidUntil): three heartbeats must fit in that.
	valid := s.ttl - backendkit.DriftAllowance(s.ttl)
	if valid <= 3*time.Millisecond {
		return nil, backendkit.Invalid("jobs", "WithTTL: %w: ttl %v leaves %v after the drift allowance, not more than three 1 ms heartbeats",
			lock.ErrInvalidTTL, s.ttl, valid)
	}
	// heartbeat and ttl ≤ lock.MaxTTL: 3·heartbeat does not overflow.
	if s.heartbeat >= valid || s.heartbeat*3 >= valid {
		return nil, backendkit.Invalid("jobs", "the heartbeat interval %v must be below a third of the ttl %v less its drift allowance %v",
			s.heartbeat, s.ttl, backendkit.DriftAllowance(s.ttl))
	}
	if err := checkElection(s.election); err != nil {
		return nil, err
	}
	// The owner is recorded in the registry as owner and recoverer.
	c, err := backendkit.Resolve("jobs", s.common, backendkit.OwnerOf(l, ""))
	if err != nil {
		return nil, err
	}
	// Resolve checks a configured owner only: the Lock's, its default, must
	// not corrupt a record either.
	if err := backendkit.CheckOwner("runner owner (WithCommon or the Lock's owner)", c.Owner); err != nil {
		return nil, backendkit.Invalid("jobs", "%w", err)
	}
	tel := backendkit.NewTelemetry(c)
	// The election's grants carry the Lock's owner, whatever the runner's.
	ec := c
	if backendkit.OwnerOf(l, "") != "" {
		ec.Owner = "" // the Lock's, which leader.Run requires
	}
	return &Runner{reg: reg, l: l, requeue: requeue, s: s, common: c, electionCommon: ec,
		inflight: map[string]*inflight{}, m: newMetrics(tel)}, nil
}

// defaultHeartbeat is the heartbeat interval of a ttl when none is set:
// ttl/4, or a quarter of the ttl less its drift allowance when three
// ttl/4 do not fit below that; at least 1 ms. It passes NewRunner's check
// for every ttl that leaves more than 3 ms after the drift allowance.
func defaultHeartbeat(ttl time.Duration) time.Duration {
	valid := ttl - backendkit.DriftAllowance(ttl)
	if h := ttl / 4; 3*h < valid {
		return h
	}
	return max(valid/4, time.Millisecond)
}

type jobKey struct{}

// JobFrom returns the job of a context that Runner.Track returned, as the
// registry recorded it: its Attempt (0 on the first run; more when
// recovered, so that the work may have run in part before), History,
// MaxRetries and Epoch.
func JobFrom(ctx context.Context) (Job, bool) {
	j, ok := ctx.Value(jobKey{}).(Job)
	return j, ok
}

// Owner is the owner identity recorded with this runner's jobs.
func (r *Runner) Owner() string { return r.common.Owner }

// Track records that this process started job and returns a context for
// the work, cancelled (cause matching ErrStale or lock.ErrLost) when the
// job is reclaimed elsewhere or this process cannot renew it in time, and
// done, to call when the job has finished, done or failed for good (err:
// its outcome, for the metrics): done removes the job from the registry,
// whatever err says. done returns ErrStale when the job was reclaimed
// meanwhile: the completion is rejected and the job runs (or ran)
// elsewhere too. A worker that gives a job up unfinished (its context
// ended, or it stops) must not call done: it ends ctx instead, and the job
// is recovered once its ttl passes.
//
// The first call of done ends the job's context and its heartbeats,
// whatever its outcome. Each call's Registry.Done is bounded by the ttl
// (WithTTL), whatever ctx says (a worker that stops still completes its
// finished jobs), so that a registry that hangs cannot hang done. done
// keeps a known outcome (nil, ErrStale) and returns it again; after any
// other error (lock.ErrUnavailable, the bound passed) the outcome is
// unknown, and a later call of done calls Registry.Done again (it is
// idempotent per epoch). A job whose completion never lands is recovered
// once its ttl passes, as a crashed worker's; a retry after that returns
// ErrStale.
//
// From Track until done, or until ctx ends, the runner heartbeats the job
// (one batched call per interval for all the jobs of this runner) and
// cancels its context if it is lost: Track starts that loop and it ends
// with the last job in flight (when the last done returns, it is gone), so
// a tracked job is protected whether or not Run runs in this process. A job
// whose ctx ends without done is no longer heartbeated: it expires and is
// recovered, as a crashed worker's would be. A job whose lease ended by
// this process's clock before Track's reply came (a slow reply: its
// validity counts from before the call) is lost at once: its context is
// already cancelled (lock.ErrLost) when Track returns. Recovering the
// jobs of crashed workers is Run's part (or Scan's, under an election of
// your own): some process must run it.
//
// The context carries the job as the registry recorded it (JobFrom): its
// Attempt counts the job's recoveries whatever Attempt the caller passed,
// since the registry keeps the count by ID.
func (r *Runner) Track(ctx context.Context, job Job) (context.Context, func(err error) error, error) {
	job.Owner = r.common.Owner
	sent := time.Now()
	tracked, err := r.reg.Track(ctx, job, r.s.ttl)
	if err != nil {
		return nil, nil, err
	}
	jctx, cancel := context.WithCancelCause(context.WithValue(ctx, jobKey{}, tracked))
	f := &inflight{ref: tracked.Ref(), cancel: cancel, validUntil: backendkit.ValidUntil(sent, r.s.ttl)}
	r.add(job.ID, f)
	r.m.tracked.Add(context.WithoutCancel(ctx), 1)
	var untracked sync.Once
	untrack := func() {
		untracked.Do(func() { r.m.tracked.Add(context.WithoutCancel(ctx), -1) })
	}
	// Once done, or once its context ends (ctx's end, or the job lost),
	// nobody works on the job any more: stop heartbeating it.
	stopForget := context.AfterFunc(jctx, func() { r.forget(job.ID, f); untrack() })
	// done's first call ends the job's life in this process; reg.Done is
	// called again by a later call as long as its outcome is unknown (it is
	// idempotent per epoch), and a known outcome is kept.
	var (
		mu      sync.Mutex
		called  bool
		settled bool  // reg.Done succeeded or was rejected
		outcome error // its error, once settled
	)
	done := func(result error) error {
		mu.Lock()
		defer mu.Unlock()
		if settled {
			return outcome
		}
		if !called {
			called = true
			stopForget()
			if last := r.forget(job.ID, f); last != nil {
				<-last.stopped // no goroutine of Track outlives the last job
			}
			untrack()
		}
		dctx, stop := context.WithTimeout(context.WithoutCancel(ctx), r.s.ttl)
		err := r.reg.Done(dctx, f.ref)
		stop()
		cancel(context.Canceled)
		completed := "ok"
		switch {
		case errors.Is(err, ErrStale):
			completed = "stale"
			r.common.Logger.Warn("leasehold: job completion rejected: it was reclaimed", "job", job.ID, "epoch", f.ref.Epoch)
		case err != nil:
			r.common.Logger.Warn("leasehold: job completion failed (outcome unknown): done may be called again", "job", job.ID, "epoch", f.ref.Epoch, "err", err)
			return err
		case result != nil:
			completed = "failed"
		}
		settled, outcome = true, err
		r.m.completed.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("leasehold.outcome", completed)))
		return err
	}
	return jctx, done, nil
}

// add puts f in flight as job id, replacing (and cancelling) the job of
// that ID this runner had, and has the heartbeat loop watch its lease. A
// job whose lease ended already (Track's reply came after it) is lost at
// once instead: its context is cancelled before Track returns.
func (r *Runner) add(id string, f *inflight) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.inflight[id]; ok {
		old.cancel(fmt.Errorf("%w: tracked again", ErrStale))
		delete(r.inflight, id)
	}
	if !time.Now().Before(f.validUntil) {
		f.cancel(backendkit.Lost("the job's lease ended before Track's reply came"))
		r.common.Logger.Warn("leasehold: job lost: its lease ended before Track's reply came", "job", id)
		r.stopIfIdle()
		return
	}
	r.inflight[id] = f
	if r.beats == nil {
		b := &beats{stopped: make(chan struct{}), wake: make(chan struct{}, 1)}
		b.ctx, b.stop = context.WithCancel(context.Background()) // the runner's, not this job's
		r.beats = b
		go r.heartbeats(b)
		return
	}
	// The loop's deadline may be later than this job's lease end (a
	// Track whose reply was slow): have it look again.
	select {
	case r.beats.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

// forget stops heartbeating job id (if f still stands for it); when it
// was the last job in flight, it ends the heartbeat loop, cancelling its
// call, and returns it.
func (r *Runner) forget(id string, f *inflight) *beats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight[id] == f {
		delete(r.inflight, id)
	}
	return r.stopIfIdle()
}

// stopIfIdle ends the heartbeat loop when no job is in flight, and returns
// it. r.mu is held.
func (r *Runner) stopIfIdle() *beats {
	b := r.beats
	if b == nil || len(r.inflight) > 0 {
		return nil
	}
	r.beats = nil
	b.stop()
	return b
}

// Run campaigns for the recovery election and, while it leads, scans for
// the expired jobs of crashed workers every scan interval, until ctx ends
// (a normal end: it returns nil). The heartbeats of this process's jobs do
// not depend on it: Track starts them.
func (r *Runner) Run(ctx context.Context) error {
	if ctx == nil {
		return backendkit.Invalid("jobs", "nil context")
	}
	r.common.Logger.Info("leasehold: jobs runner started", "owner", r.common.Owner, "election", r.s.election,
		"ttl", r.s.ttl, "heartbeat_interval", r.s.heartbeat, "scan_interval", r.s.scan, "max_retries", r.s.maxRetries,
		"retry_backoff_base", r.s.base, "retry_backoff_cap", r.s.cap, "retry_jitter", r.s.jitter)
	err := leader.Run(ctx, r.l, r.s.election, r.recover,
		leader.WithTTL(r.s.ttl), leader.WithRenewInterval(r.s.ttl/3), leader.WithRetryInterval(r.s.scan),
		leader.WithCommon(r.electionCommon))
	r.common.Logger.Info("leasehold: jobs runner stopped", "owner", r.common.Owner, "err", err)
	return err
}

// heartbeats is the heartbeat loop: it runs while jobs are in flight,
// until b.ctx ends.
func (r *Runner) heartbeats(b *beats) {
	defer close(b.stopped)
	tick := time.NewTicker(r.s.heartbeat)
	defer tick.Stop()
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()
	for {
		r.resetDeadline(deadline)
		select {
		case <-b.ctx.Done():
			return
		case <-b.wake: // re-armed at the top
		case <-deadline.C:
			r.expireLocal()
		case <-tick.C:
			r.heartbeat(b.ctx)
		}
	}
}

func (r *Runner) snapshot() []Ref {
	r.mu.Lock()
	defer r.mu.Unlock()
	refs := make([]Ref, 0, len(r.inflight))
	for _, f := range r.inflight {
		refs = append(refs, f.ref)
	}
	return refs
}

// heartbeat extends every in-flight job in one call of the registry
// (redisjobs and pgjobs send it in chunks, several in flight at once).
func (r *Runner) heartbeat(ctx context.Context) {
	refs := r.snapshot()
	if len(refs) == 0 {
		return
	}
	sent := time.Now()
	// The call may not outlast the first job's lease: the loop that ends
	// expired jobs waits for it.
	end := sent.Add(r.s.heartbeat)
	if first := r.firstValidUntil(); first.Before(end) {
		end = first
	}
	hctx, cancel := context.WithDeadline(ctx, end)
	lost, err := r.reg.Heartbeat(hctx, refs, r.s.ttl)
	cancel()
	// A heartbeat sent in chunks may fail in part: the jobs of the failed
	// chunks keep their lease end, the others are extended or lost.
	var partial *HeartbeatError
	if err != nil {
		if ctx.Err() != nil {
			return // the last job left: not a failure
		}
		r.m.heartbeats.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("leasehold.outcome", "error")))
		if !errors.As(err, &partial) {
			r.common.Logger.Warn("leasehold: job heartbeat failed; jobs stay valid until their lease ends", "jobs", len(refs), "err", err)
			return
		}
		r.common.Logger.Warn("leasehold: job heartbeat failed in part; those jobs stay valid until their lease ends",
			"jobs", len(refs), "unknown", len(partial.Unknown), "err", err)
	} else {
		r.m.heartbeats.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("leasehold.outcome", "ok")))
	}
	gone := map[string]bool{}
	for _, id := range lost {
		gone[id] = true
	}
	unknown := map[string]bool{}
	if partial != nil {
		for _, id := range partial.Unknown {
			unknown[id] = true
		}
	}
	validUntil := backendkit.ValidUntil(sent, r.s.ttl)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		f, ok := r.inflight[ref.ID]
		if !ok || f.ref != ref || unknown[ref.ID] {
			continue
		}
		if gone[ref.ID] {
			f.cancel(fmt.Errorf("%w: %s was reclaimed elsewhere", ErrStale, ref.ID))
			delete(r.inflight, ref.ID)
			r.common.Logger.Warn("leasehold: job lost: reclaimed elsewhere", "job", ref.ID, "epoch", ref.Epoch)
			continue
		}
		f.validUntil = validUntil
	}
	r.stopIfIdle()
}

// expireLocal cancels the jobs whose lease ended without a heartbeat.
func (r *Runner) expireLocal() {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, f := range r.inflight {
		if !now.Before(f.validUntil) {
			f.cancel(backendkit.Lost("the job's lease ended without a successful heartbeat"))
			delete(r.inflight, id)
			r.common.Logger.Warn("leasehold: job lost: no heartbeat within its lease", "job", id)
		}
	}
	r.stopIfIdle()
}

func (r *Runner) resetDeadline(t *time.Timer) {
	t.Reset(time.Until(r.firstValidUntil()))
}

// firstValidUntil is the earliest lease end of the in-flight jobs (an hour
// from now when there are none).
func (r *Runner) firstValidUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	next := time.Now().Add(time.Hour)
	for _, f := range r.inflight {
		if f.validUntil.Before(next) {
			next = f.validUntil
		}
	}
	return next
}

// recover scans every scan interval while this process leads the election.
func (r *Runner) recover(ctx context.Context) error {
	tick := time.NewTicker(r.s.scan)
	defer tick.Stop()
	for {
		r.Scan(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Scan recovers the expired jobs once and returns how many it requeued.
// Run calls it every scan interval while it leads the recovery election.
// Called directly (tests, tools, or a recovery loop under an election of
// your own, as leader.Run around a loop of Scan), it must run in one
// process at a time. It heartbeats nothing: Track does that for the jobs
// of this process. It recovers the jobs one after another, or up to
// WithRecoveryConcurrency's count at once, and returns when every
// recovery it started has ended; once ctx ends it starts none, waits for
// those under way (a Requeue should end with its ctx), and removes the
// jobs it requeued, each Remove for at most a second more. Over a
// registry that is a BatchRecoverer it reclaims the jobs, and removes
// those it requeued, in chunks of RecoveryChunk, one call each a chunk
// (one round trip of wall time), and buries or requeues each job of a
// chunk in turn, or up to WithRecoveryConcurrency's count at once. A step
// that fails because ctx has ended (a shutdown) is logged at Debug, any
// other failure at Warn. A nil ctx is refused: Scan logs it at Warn and
// returns 0, having touched nothing.
func (r *Runner) Scan(ctx context.Context) int {
	if ctx == nil {
		r.common.Logger.Warn("leasehold: recovery scan refused", "err", backendkit.Invalid("jobs", "nil context"))
		return 0
	}
	start := time.Now()
	defer func() { r.m.scan.Record(context.WithoutCancel(ctx), time.Since(start).Seconds()) }()
	expired, err := r.reg.Expired(ctx, r.s.batch)
	if err != nil {
		r.failed(ctx, "leasehold: recovery scan failed", "err", err)
		return 0
	}
	r.m.expired.Add(context.WithoutCancel(ctx), int64(len(expired)))
	if br, ok := r.reg.(BatchRecoverer); ok {
		return r.recoverEach(ctx, br, expired)
	}
	var recovered atomic.Int64
	r.each(ctx, len(expired), func(i int) {
		if r.recoverOne(ctx, expired[i]) {
			recovered.Add(1)
		}
	})
	return int(recovered.Load())
}

// each calls f(i) for each i in 0..n-1, in order one after another, or up
// to r.s.recoverers at once (WithRecoveryConcurrency), each on a goroutine
// of its own; it starts none once ctx has ended, and returns when all it
// started have.
func (r *Runner) each(ctx context.Context, n int, f func(i int)) {
	if r.s.recoverers == 1 || n < 2 {
		for i := range n {
			if ctx.Err() != nil {
				return
			}
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, r.s.recoverers)
start:
	for i := range n {
		select {
		case <-ctx.Done():
			break start
		case slots <- struct{}{}:
		}
		if ctx.Err() != nil { // both were ready: start nothing after ctx ended
			<-slots
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			f(i)
		})
	}
	wg.Wait()
}

// failed logs a failed step of a recovery at Warn, or at Debug when ctx
// has ended: a shutdown (the election lost, Run's context ended) is not a
// failure.
func (r *Runner) failed(ctx context.Context, msg string, args ...any) {
	if ctx.Err() != nil {
		r.common.Logger.Debug(msg+" (shutting down)", args...)
		return
	}
	r.common.Logger.Warn(msg, args...)
}

func (r *Runner) step(s Step, j Job) {
	if r.s.onStep != nil {
		r.s.onStep(s, j)
	}
}

// recoverOne: reclaim, then bury or requeue, then remove. A crash between
// two steps leaves the entry tracked under the recoverer's epoch; it
// expires again and is recovered again: never lost, at worst requeued twice.
func (r *Runner) recoverOne(ctx context.Context, j Job) bool {
	c, err := r.reg.Reclaim(ctx, j.Ref(), r.common.Owner, r.s.ttl)
	if !r.reclaimed(ctx, j, err) {
		return false
	}
	r.step(StepReclaimed, c)
	delay, ok := r.settle(ctx, j, c)
	if !ok {
		return false
	}
	rctx, cancel := r.finishing(ctx)
	defer cancel()
	r.removed(ctx, j, c, delay, r.reg.Remove(rctx, c.Ref()))
	return true
}

// removeGrace is how long the Remove of jobs already requeued may go on
// once the scan's context has ended (see finishing).
const removeGrace = time.Second

// finishing is the context of the Remove of jobs requeued under ctx: its
// values without its end, for at most the ttl, and at most removeGrace
// once ctx ends. A scan cut short (a shutdown, the election lost) still
// removes what it requeued, which would else be requeued again once the
// ttl passes, and returns soon after all the same; the Remove of a job is
// of its epoch, harmless whoever leads.
func (r *Runner) finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.ttl)
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(removeGrace, cancel)
		context.AfterFunc(rctx, func() { t.Stop() })
	})
	return rctx, func() { stop(); cancel() }
}

// recoverEach is recoverOne's steps for chunks of RecoveryChunk expired
// jobs: one ReclaimEach a chunk, then the bury or requeue of each job it
// reclaimed (up to WithRecoveryConcurrency's count at once), then one
// RemoveEach of those requeued (see finishing). Once ctx ends it starts no
// chunk, and no bury or requeue: the jobs a chunk reclaimed and left stay
// in flight under this recoverer's epoch, expire again and are recovered
// again (a second recovery: Attempt+1).
func (r *Runner) recoverEach(ctx context.Context, br BatchRecoverer, expired []Job) int {
	recovered := 0
	for len(expired) > 0 && ctx.Err() == nil {
		part := expired[:min(RecoveryChunk, len(expired))]
		expired = expired[len(part):]
		refs := make([]Ref, len(part))
		for i, j := range part {
			refs[i] = j.Ref()
		}
		type claim struct {
			j, c  Job
			delay time.Duration
			ok    bool // requeued
		}
		var claims []claim
		for i, got := range fitReclaims(br, br.ReclaimEach(ctx, refs, r.common.Owner, r.s.ttl), len(refs)) {
			if r.reclaimed(ctx, part[i], got.Err) {
				r.step(StepReclaimed, got.Job)
				claims = append(claims, claim{j: part[i], c: got.Job})
			}
		}
		r.each(ctx, len(claims), func(i int) {
			claims[i].delay, claims[i].ok = r.settle(ctx, claims[i].j, claims[i].c)
		})
		claims = slices.DeleteFunc(claims, func(c claim) bool { return !c.ok })
		if len(claims) == 0 {
			continue
		}
		refs = refs[:0]
		for _, c := range claims {
			refs = append(refs, c.c.Ref())
		}
		rctx, cancel := r.finishing(ctx)
		removed := fitRemoves(br, br.RemoveEach(rctx, refs), len(refs))
		cancel()
		for i, err := range removed {
			r.removed(ctx, claims[i].j, claims[i].c, claims[i].delay, err)
			recovered++
		}
	}
	return recovered
}

// reclaimed tells whether the Reclaim of the expired job j succeeded (err
// nil), logging its failure unless another recoverer, or the worker's
// heartbeat, took the job first (ErrStale).
func (r *Runner) reclaimed(ctx context.Context, j Job, err error) bool {
	if err != nil {
		if !errors.Is(err, ErrStale) {
			r.failed(ctx, "leasehold: reclaiming a job failed", "job", j.ID, "err", err)
		}
		return false
	}
	return true
}

// settle buries the reclaimed job c (reclaimed from j) when it has run out
// of retries, else requeues it; it reports the requeue's delay and whether
// c was requeued (and is to be removed).
func (r *Runner) settle(ctx context.Context, j, c Job) (time.Duration, bool) {
	maxRetries := r.s.maxRetries
	if c.MaxRetries > 0 { // the job's own
		maxRetries = c.MaxRetries
	}
	if c.Attempt > maxRetries {
		reason := fmt.Sprintf("recovered %d times (MaxRetries %d): its workers keep crashing", c.Attempt-1, maxRetries)
		if err := r.reg.Bury(ctx, c.Ref(), reason); err != nil {
			r.failed(ctx, "leasehold: burying a job failed", "job", c.ID, "err", err)
			return 0, false
		}
		r.step(StepBuried, c)
		r.m.dead.Add(context.WithoutCancel(ctx), 1)
		r.common.Logger.Warn("leasehold: job moved to the dead set", "job", c.ID, "attempt", c.Attempt, "from", j.Owner, "by", r.common.Owner, "reason", reason)
		if r.s.onDead != nil {
			r.s.onDead(ctx, DeadJob{Job: c, DiedAt: time.Now(), Reason: reason})
		}
		return 0, false
	}
	delay := r.backoff(c.Attempt)
	if err := r.requeue(ctx, c, delay); err != nil {
		r.failed(ctx, "leasehold: requeueing a recovered job failed; it will be retried", "job", c.ID, "err", err)
		return 0, false
	}
	r.step(StepRequeued, c)
	return delay, true
}

// removed ends the recovery of the requeued job c (reclaimed from j) with
// its Remove's error err: the job is recovered, and a Remove that failed
// (but not one that found it gone: ErrStale, a worker tracked it again
// already) leaves it to be requeued again.
func (r *Runner) removed(ctx context.Context, j, c Job, delay time.Duration, err error) {
	if err != nil && !errors.Is(err, ErrStale) {
		// At Warn also when ctx has ended: the job will be requeued again.
		r.common.Logger.Warn("leasehold: removing a requeued job failed; it may be requeued again", "job", c.ID, "err", err)
		return
	}
	r.step(StepRemoved, c)
	r.m.recovered.Add(context.WithoutCancel(ctx), 1)
	r.common.Logger.Info("leasehold: job recovered", "job", c.ID, "attempt", c.Attempt, "from", j.Owner, "by", r.common.Owner, "delay", delay)
}

// backoff is uniform in [(1−jitter)·d, d] for the schedule's
// d = min(base·2^(attempt−1), cap).
func (r *Runner) backoff(attempt int) time.Duration {
	d := r.s.base
	for i := 1; i < attempt && d > 0 && d < r.s.cap; i++ {
		if d > r.s.cap/2 {
			d = r.s.cap // doubling would pass the cap (or overflow)
			break
		}
		d *= 2
	}
	d = min(d, r.s.cap)
	if d <= 0 {
		return 0
	}
	spread := time.Duration(float64(d) * r.s.jitter) // ≤ d: no overflow
	if spread <= 0 {
		return d
	}
	return d - rand.N(spread+1)
}

// RetryDead requeues a dead job as new — its ID, payload and MaxRetries,
// Attempt 0, no history, no epoch, owner or deadline of its past life —
// with no delay. It takes the job out of the dead set as a recoverer takes
// a crashed worker's: it tracks it again, as this runner's, under a
// holding lease of a minute, purges its dead record (its history is
// readable until then: DeadJob, OnDead), calls Requeue, and removes it
// from flight. No recovery scan can reclaim the job, and bury it again,
// before the purge, and the purge of a BurialPurger deletes the burial the
// job was taken out of alone: neither can delete such a new burial.
//
// A crash or a failure at any step leaves the job dead, in flight or
// requeued: never lost. A job left in flight (Requeue failed, and
// RetryDead returns its error) is requeued by the recovery scan once the
// minute passes, as a recovery (Attempt 1); one left both in flight and
// requeued (Remove failed) may be requeued twice.
func (r *Runner) RetryDead(ctx context.Context, id string) error {
	t, err := unbury(ctx, r.reg, id, r.common.Owner)
	if err != nil {
		return err
	}
	if err := r.requeue(ctx, Job{ID: t.ID, Payload: t.Payload, MaxRetries: t.MaxRetries}, 0); err != nil {
		return err
	}
	// ErrStale: a worker took the requeued job and tracked it already.
	if err := r.reg.Remove(ctx, t.Ref()); err != nil && !errors.Is(err, ErrStale) {
		return err
	}
	return nil
}

type metrics struct {
	tracked                  metric.Int64UpDownCounter
	heartbeats, completed    metric.Int64Counter
	expired, recovered, dead metric.Int64Counter
	scan                     metric.Float64Histogram
}

func newMetrics(tel *backendkit.Telemetry) *metrics {
	m := tel.Meter
	out := &metrics{}
	out.tracked, _ = m.Int64UpDownCounter("leasehold.jobs.tracked", metric.WithDescription("Jobs in flight in this process."))
	out.heartbeats, _ = m.Int64Counter("leasehold.jobs.heartbeats", metric.WithDescription("Batched heartbeats, by outcome."))
	out.completed, _ = m.Int64Counter("leasehold.jobs.completed", metric.WithDescription("Jobs finished, by outcome (ok, failed, stale)."))
	out.expired, _ = m.Int64Counter("leasehold.jobs.expired", metric.WithDescription("Expired jobs found by recovery scans."))
	out.recovered, _ = m.Int64Counter("leasehold.jobs.recovered", metric.WithDescription("Jobs requeued after their worker crashed."))
	out.dead, _ = m.Int64Counter("leasehold.jobs.dead", metric.WithDescription("Jobs moved to the dead set."))
	out.scan, _ = m.Float64Histogram("leasehold.jobs.scan.duration", metric.WithUnit("s"), metric.WithDescription("Duration of recovery scans."))
	return out
}
