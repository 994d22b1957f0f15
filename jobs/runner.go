package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Defaults: a crashed worker's jobs are requeued about DefaultTTL +
// DefaultScanInterval = 20 s after its last heartbeat.
const (
	DefaultTTL               = 15 * time.Second
	DefaultHeartbeatInterval = 4 * time.Second
	DefaultScanInterval      = 5 * time.Second
	DefaultMaxRetries        = 5
	DefaultRetryBackoffBase  = time.Second
	DefaultRetryBackoffCap   = 5 * time.Minute
	DefaultScanBatch         = 1000
)

// Requeue puts a recovered job back on the user's queue, to run after
// delay (exponential backoff with full jitter over the job's Attempt). It
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
	batch                int
	election             string
	onDead               func(context.Context, DeadJob)
	onStep               func(Step, Job)
	common               lock.Common
}

// MaxScanBatch is the most expired jobs one scan reads (WithScanBatch), so
// that no listing call does unbounded work on the server.
const MaxScanBatch = 10000

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
// DefaultTTL): at least a millisecond, at most lock.MaxTTL and the
// election lock's MaxTTL (it is also the recovery election's ttl); else
// NewRunner returns an error matching lock.ErrInvalidTTL.
func WithTTL(d time.Duration) Option {
	return func(s *settings) error { s.ttl = d; return nil }
}

// WithHeartbeatInterval sets the period of the one batched heartbeat a
// process sends for all its jobs (default DefaultHeartbeatInterval): at
// least 1 ms, and below a third of the ttl.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(s *settings) error { s.heartbeat = d; return interval("heartbeat interval", d) }
}

// WithScanInterval sets how often the recoverer looks for expired jobs
// (default DefaultScanInterval; 1 ms to lock.MaxTTL).
func WithScanInterval(d time.Duration) Option {
	return func(s *settings) error { s.scan = d; return interval("scan interval", d) }
}

// WithMaxRetries sets how many recoveries a job gets before the dead set:
// 0 to MaxAttempt.
func WithMaxRetries(n int) Option {
	return func(s *settings) error {
		if n < 0 || n > MaxAttempt {
			return fmt.Errorf("max retries %d is outside 0..%d", n, MaxAttempt)
		}
		s.maxRetries = n
		return nil
	}
}

// WithRetryBackoff sets the delay before a recovered job is requeued: full
// jitter over base·2^(attempt−1), capped at cap; 0 ≤ base ≤ cap ≤
// lock.MaxTTL.
func WithRetryBackoff(base, cap time.Duration) Option {
	return func(s *settings) error {
		if base < 0 || cap < base || cap > lock.MaxTTL {
			return fmt.Errorf("retry backoff base %v, cap %v: want 0 ≤ base ≤ cap ≤ %v", base, cap, lock.MaxTTL)
		}
		s.base, s.cap = base, cap
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
	s := &settings{ttl: DefaultTTL, heartbeat: DefaultHeartbeatInterval, scan: DefaultScanInterval,
		maxRetries: DefaultMaxRetries, base: DefaultRetryBackoffBase, cap: DefaultRetryBackoffCap,
		batch: DefaultScanBatch, election: "jobs-recovery"}
	if err := backendkit.Apply("jobs", s, opts); err != nil {
		return nil, err
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
	// ttl ≤ lock.MaxTTL, so 3·heartbeat below it does not overflow.
	if s.heartbeat >= s.ttl || s.heartbeat*3 >= s.ttl {
		return nil, backendkit.Invalid("jobs", "the heartbeat interval %v must be below a third of the ttl %v", s.heartbeat, s.ttl)
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

// Owner is the owner identity recorded with this runner's jobs.
func (r *Runner) Owner() string { return r.common.Owner }

// Track records that this process started job and returns a context for
// the work, cancelled (cause matching ErrStale or lock.ErrLost) when the
// job is reclaimed elsewhere or this process cannot renew it in time, and
// done, to call when the job has finished (err: its outcome, for the
// metrics). done returns ErrStale when the job was reclaimed meanwhile: the
// completion is rejected and the job runs (or ran) elsewhere too.
func (r *Runner) Track(ctx context.Context, job Job) (context.Context, func(err error) error, error) {
	job.Owner = r.common.Owner
	sent := time.Now()
	tracked, err := r.reg.Track(ctx, job, r.s.ttl)
	if err != nil {
		return nil, nil, err
	}
	jctx, cancel := context.WithCancelCause(ctx)
	f := &inflight{ref: tracked.Ref(), cancel: cancel, validUntil: backendkit.ValidUntil(sent, r.s.ttl)}
	r.mu.Lock()
	if old, ok := r.inflight[job.ID]; ok {
		old.cancel(fmt.Errorf("%w: tracked again", ErrStale))
	}
	r.inflight[job.ID] = f
	r.mu.Unlock()
	r.m.tracked.Add(context.WithoutCancel(ctx), 1)
	var once sync.Once
	done := func(result error) error {
		var err error
		once.Do(func() {
			r.mu.Lock()
			if r.inflight[job.ID] == f {
				delete(r.inflight, job.ID)
			}
			r.mu.Unlock()
			r.m.tracked.Add(context.WithoutCancel(ctx), -1)
			err = r.reg.Done(context.WithoutCancel(ctx), f.ref)
			outcome := "ok"
			switch {
			case errors.Is(err, ErrStale):
				outcome = "stale"
				r.common.Logger.Warn("leasehold: job completion rejected: it was reclaimed", "job", job.ID, "epoch", f.ref.Epoch)
			case result != nil:
				outcome = "failed"
			}
			r.m.completed.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("leasehold.outcome", outcome)))
			cancel(context.Canceled)
		})
		return err
	}
	return jctx, done, nil
}

// Run sends the heartbeats of this process's jobs and campaigns for the
// recovery election, scanning for expired jobs while it leads, until ctx
// ends.
func (r *Runner) Run(ctx context.Context) error {
	if ctx == nil {
		return backendkit.Invalid("jobs", "nil context")
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.heartbeats(ctx) })
	err := leader.Run(ctx, r.l, r.s.election, r.recover,
		leader.WithTTL(r.s.ttl), leader.WithRenewInterval(r.s.ttl/3), leader.WithRetryInterval(r.s.scan),
		leader.WithCommon(r.electionCommon))
	wg.Wait()
	return err
}

func (r *Runner) heartbeats(ctx context.Context) {
	tick := time.NewTicker(r.s.heartbeat)
	defer tick.Stop()
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()
	for {
		r.resetDeadline(deadline)
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			r.expireLocal()
		case <-tick.C:
			r.heartbeat(ctx)
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

// heartbeat extends every in-flight job in one round trip.
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
	if err != nil {
		r.m.heartbeats.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("leasehold.outcome", "error")))
		r.common.Logger.Warn("leasehold: job heartbeat failed; jobs stay valid until their lease ends", "jobs", len(refs), "err", err)
		return
	}
	r.m.heartbeats.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("leasehold.outcome", "ok")))
	gone := map[string]bool{}
	for _, id := range lost {
		gone[id] = true
	}
	validUntil := backendkit.ValidUntil(sent, r.s.ttl)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		f, ok := r.inflight[ref.ID]
		if !ok || f.ref != ref {
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

// Scan recovers the expired jobs once (Run calls it while leading; tests
// and tools may call it directly) and returns how many it requeued.
func (r *Runner) Scan(ctx context.Context) int {
	start := time.Now()
	defer func() { r.m.scan.Record(context.WithoutCancel(ctx), time.Since(start).Seconds()) }()
	expired, err := r.reg.Expired(ctx, r.s.batch)
	if err != nil {
		r.common.Logger.Warn("leasehold: recovery scan failed", "err", err)
		return 0
	}
	r.m.expired.Add(context.WithoutCancel(ctx), int64(len(expired)))
	recovered := 0
	for _, j := range expired {
		if ctx.Err() != nil {
			break
		}
		if r.recoverOne(ctx, j) {
			recovered++
		}
	}
	return recovered
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
	if err != nil {
		if !errors.Is(err, ErrStale) {
			r.common.Logger.Warn("leasehold: reclaiming a job failed", "job", j.ID, "err", err)
		}
		return false
	}
	r.step(StepReclaimed, c)
	maxRetries := r.s.maxRetries
	if c.MaxRetries > 0 { // the job's own
		maxRetries = c.MaxRetries
	}
	if c.Attempt > maxRetries {
		reason := fmt.Sprintf("recovered %d times (MaxRetries %d): its workers keep crashing", c.Attempt-1, maxRetries)
		if err := r.reg.Bury(ctx, c.Ref(), reason); err != nil {
			r.common.Logger.Warn("leasehold: burying a job failed", "job", c.ID, "err", err)
			return false
		}
		r.step(StepBuried, c)
		r.m.dead.Add(context.WithoutCancel(ctx), 1)
		r.common.Logger.Warn("leasehold: job moved to the dead set", "job", c.ID, "attempt", c.Attempt, "reason", reason)
		if r.s.onDead != nil {
			r.s.onDead(ctx, DeadJob{Job: c, DiedAt: time.Now(), Reason: reason})
		}
		return false
	}
	delay := r.backoff(c.Attempt)
	if err := r.requeue(ctx, c, delay); err != nil {
		r.common.Logger.Warn("leasehold: requeueing a recovered job failed; it will be retried", "job", c.ID, "err", err)
		return false
	}
	r.step(StepRequeued, c)
	if err := r.reg.Remove(ctx, c.Ref()); err != nil && !errors.Is(err, ErrStale) {
		r.common.Logger.Warn("leasehold: removing a requeued job failed; it may be requeued again", "job", c.ID, "err", err)
		return true
	}
	r.step(StepRemoved, c)
	r.m.recovered.Add(context.WithoutCancel(ctx), 1)
	r.common.Logger.Info("leasehold: job recovered", "job", c.ID, "attempt", c.Attempt, "from", j.Owner, "delay", delay)
	return true
}

// backoff is full jitter over base·2^(attempt−1), capped.
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
	return rand.N(d + 1)
}

// RetryDead requeues a dead job as new — its ID and payload, Attempt 0, no
// history, no epoch, owner or deadline of its past life — with no delay,
// and then deletes it from the dead set. Its history is readable until
// then (DeadJob, OnDead). A crash in between leaves it both requeued and
// dead: never lost.
func (r *Runner) RetryDead(ctx context.Context, id string) error {
	d, err := r.reg.DeadJob(ctx, id)
	if err != nil {
		return err
	}
	j := Job{ID: d.ID, Payload: d.Payload}
	if err := r.requeue(ctx, j, 0); err != nil {
		return err
	}
	return r.reg.Purge(ctx, id)
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
