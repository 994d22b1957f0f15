package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// queue records requeued jobs.
type queue struct {
	mu   sync.Mutex
	jobs []jobs.Job
	at   []time.Time
	fail bool
}

func (q *queue) requeue(ctx context.Context, j jobs.Job, delay time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail {
		return errors.New("queue down")
	}
	q.jobs = append(q.jobs, j)
	q.at = append(q.at, time.Now())
	return nil
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.jobs)
}

func newRunner(t *testing.T, reg jobs.Registry, l lock.Lock, q *queue, opts ...jobs.Option) *jobs.Runner {
	t.Helper()
	r, err := jobs.NewRunner(reg, l, q.requeue, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// crashWith tracks j on r and crashes at once: the job's context ends
// without done, so r stops heartbeating it, as a killed process would.
func crashWith(t *testing.T, r *jobs.Runner, j jobs.Job) {
	t.Helper()
	ctx, crash := context.WithCancel(t.Context())
	defer crash()
	if _, _, err := r.Track(ctx, j); err != nil {
		t.Fatal(err)
	}
}

// A worker that stops heartbeating (crashed) has its jobs requeued within
// lease + scan interval; the defaults make that about 20 s.
func TestCrashedWorkerIsRecoveredWithinLeasePlusScan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		worker := newRunner(t, reg, testkit.Must(table.Share(memlock.WithCommon(lock.Common{Owner: "worker"}))), &q)
		recoverer := newRunner(t, reg, testkit.Must(table.Share(memlock.WithCommon(lock.Common{Owner: "recoverer"}))), &q)
		wctx, crash := context.WithCancel(t.Context())
		go worker.Run(wctx)
		rctx, stop := context.WithCancel(t.Context())
		defer stop()
		go recoverer.Run(rctx)
		for _, id := range []string{"a", "b", "c"} {
			if _, _, err := worker.Track(wctx, jobs.Job{ID: id, Payload: []byte(id)}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Minute) // heartbeats keep them alive
		synctest.Wait()
		if q.len() != 0 {
			t.Fatalf("jobs requeued while their worker heartbeats: %+v", q.jobs)
		}
		crash() // the last heartbeat was at 60 s (every 4 s)
		crashed := time.Now()
		for q.len() < 3 {
			time.Sleep(100 * time.Millisecond)
		}
		if took := q.at[2].Sub(crashed); took > jobs.DefaultTTL+jobs.DefaultScanInterval {
			t.Fatalf("requeued %v after the crash, more than lease + scan (20 s)", took)
		}
		for _, j := range q.jobs {
			if j.Attempt != 1 || len(j.History) != 1 || j.History[0].From != "worker" {
				t.Fatalf("requeued %+v", j)
			}
		}
		if c, _ := reg.Counts(t.Context()); c.Tracked != 0 {
			t.Fatalf("entries left after the recovery: %+v", c)
		}
	})
}

// cutOff is a registry whose heartbeats fail: a worker cut off from it.
type cutOff struct{ jobs.Registry }

func (cutOff) Heartbeat(context.Context, []jobs.Ref, time.Duration) ([]string, error) {
	return nil, backendkit.Unavailable("heartbeat", errors.New("network unreachable"))
}

// A zombie: cut off from the registry, its job context is cancelled when
// its lease ends by its own clock, and its late Done is rejected.
func TestZombieWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		worker := newRunner(t, cutOff{reg}, testkit.Must(table.Share()), &q)
		recoverer := newRunner(t, reg, testkit.Must(table.Share()), &q)
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		go worker.Run(ctx)
		jctx, done, err := worker.Track(t.Context(), jobs.Job{ID: "z"})
		if err != nil {
			t.Fatal(err)
		}
		tracked := time.Now()
		<-jctx.Done()
		if lived := time.Since(tracked); lived > jobs.DefaultTTL {
			t.Fatalf("job context lived %v without a heartbeat, longer than the lease", lived)
		}
		time.Sleep(jobs.DefaultScanInterval + time.Second)
		recoverer.Scan(t.Context()) // whoever leads the recovery has requeued it by now
		if q.len() != 1 {
			t.Fatalf("requeued %d jobs, want 1", q.len())
		}
		// Its own deadline has cancelled the job's context meanwhile.
		if !errors.Is(context.Cause(jctx), lock.ErrLost) {
			t.Fatalf("job context after the lease: %v", context.Cause(jctx))
		}
		if err := done(nil); !errors.Is(err, jobs.ErrStale) {
			t.Fatalf("the zombie's Done: %v, want ErrStale", err)
		}
	})
}

// A heartbeat that finds the job re-tracked elsewhere cancels it at once,
// and its done is rejected; without Run in the process (Track's heartbeats
// do it: without Run, nothing did).
func TestHeartbeatCancelsAReclaimedJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		worker := newRunner(t, reg, testkit.Must(table.Share()), &q)
		jctx, done, err := worker.Track(t.Context(), jobs.Job{ID: "j"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "j", Owner: "someone else"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(jobs.DefaultHeartbeatInterval)
		synctest.Wait()
		if !errors.Is(context.Cause(jctx), jobs.ErrStale) {
			t.Fatalf("job context after its entry went stale: %v", context.Cause(jctx))
		}
		if err := done(nil); !errors.Is(err, jobs.ErrStale) {
			t.Fatalf("done: %v, want ErrStale", err)
		}
	})
}

// A job that keeps crashing its workers ends in the dead set after
// MaxRetries, with its history; RetryDead requeues it.
func TestPoisonJobGoesToTheDeadSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		var dead []jobs.DeadJob
		crashing := newRunner(t, reg, testkit.Must(table.Share(memlock.WithCommon(lock.Common{Owner: "crashing"}))), &q)
		recoverer := newRunner(t, reg, testkit.Must(table.Share(memlock.WithCommon(lock.Common{Owner: "recoverer"}))), &q,
			jobs.WithMaxRetries(2), jobs.OnDead(func(_ context.Context, d jobs.DeadJob) { dead = append(dead, d) }))
		crashWith(t, crashing, jobs.Job{ID: "poison"})
		for round := 0; len(dead) == 0 && round < 10; round++ {
			time.Sleep(jobs.DefaultTTL + time.Second)
			recoverer.Scan(t.Context())
			if n := q.len(); n > 0 { // a worker picks the requeued job up and crashes again
				j := q.jobs[n-1]
				q.jobs = q.jobs[:n-1]
				crashWith(t, crashing, j)
			}
		}
		if len(dead) != 1 || dead[0].Attempt != 3 || len(dead[0].History) != 3 {
			t.Fatalf("dead %+v; want the job after 2 retries, attempt 3, 3 recoveries in its history", dead)
		}
		listed, _ := reg.Dead(t.Context(), 10)
		if len(listed) != 1 || listed[0].ID != "poison" {
			t.Fatalf("dead set %+v", listed)
		}
		if err := recoverer.RetryDead(t.Context(), "poison"); err != nil {
			t.Fatal(err)
		}
		if q.len() != 1 || q.jobs[0].ID != "poison" || q.jobs[0].Attempt != 0 {
			t.Fatalf("retried: %+v", q.jobs)
		}
		if listed, _ := reg.Dead(t.Context(), 10); len(listed) != 0 {
			t.Fatalf("still dead after RetryDead: %+v", listed)
		}
	})
}

// A requeue that fails leaves the job reclaimed; it expires again and is
// recovered by a later scan: never lost.
func TestFailedRequeueIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		q := queue{fail: true}
		recoverer := newRunner(t, reg, testkit.Must(table.Share()), &q)
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "x"}, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if n := recoverer.Scan(t.Context()); n != 0 {
			t.Fatalf("recovered %d with the queue down", n)
		}
		q.mu.Lock()
		q.fail = false
		q.mu.Unlock()
		time.Sleep(jobs.DefaultTTL + time.Second)
		if n := recoverer.Scan(t.Context()); n != 1 || q.len() != 1 {
			t.Fatalf("recovered %d after the queue came back", n)
		}
	})
}

// The requeue delay of attempt n is uniform over [0, min(base·2^(n−1), cap)]:
// every recovery gets one, within its bound, and they spread over it (some
// in the lower half, some in the upper: the chance that 32 uniform draws
// all land in one half is 2^-31).
func TestBackoffIsFullJitterUnderTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const perAttempt = 32
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		delays := map[int][]time.Duration{} // by the attempt requeued
		r, err := jobs.NewRunner(reg, table, func(_ context.Context, j jobs.Job, d time.Duration) error {
			delays[j.Attempt] = append(delays[j.Attempt], d)
			return nil
		}, jobs.WithRetryBackoff(time.Second, 4*time.Second), jobs.WithMaxRetries(100))
		if err != nil {
			t.Fatal(err)
		}
		bounds := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
		for prior := range bounds {
			for i := range perAttempt {
				if _, err := reg.Track(t.Context(), jobs.Job{ID: fmt.Sprintf("b%d-%d", prior, i), Attempt: prior}, time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(time.Second)
		if n := r.Scan(t.Context()); n != perAttempt*len(bounds) {
			t.Fatalf("recovered %d, want %d", n, perAttempt*len(bounds))
		}
		for i, bound := range bounds {
			attempt := i + 1
			ds := delays[attempt]
			if len(ds) != perAttempt {
				t.Fatalf("attempt %d: %d delays, want %d", attempt, len(ds), perAttempt)
			}
			low, high := 0, 0
			for _, d := range ds {
				if d < 0 || d > bound {
					t.Fatalf("attempt %d delay %v, want within [0, %v]", attempt, d, bound)
				}
				if d < bound/2 {
					low++
				} else {
					high++
				}
			}
			if low == 0 || high == 0 {
				t.Fatalf("attempt %d: delays %v do not spread over [0, %v]", attempt, ds, bound)
			}
		}
	})
}

// A job that fails (done with an error) is an ordinary failure: its entry
// goes, and it never counts as a recovery — Attempt stays, and no number of
// failures sends it to the dead set.
func TestFailedJobsAreNotRecoveries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		r := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithMaxRetries(1))
		j := jobs.Job{ID: "flaky", Payload: []byte("p")}
		for range 5 {
			_, done, err := r.Track(t.Context(), j)
			if err != nil {
				t.Fatal(err)
			}
			if err := done(errors.New("the job failed")); err != nil {
				t.Fatalf("done(err): %v", err)
			}
			if c, _ := reg.Counts(t.Context()); c.Tracked != 0 || c.Dead != 0 {
				t.Fatalf("after a failure: %+v, want no entry and nothing dead", c)
			}
		}
		// Now its worker crashes: the first recovery, Attempt 1, requeued
		// (MaxRetries 1), not the sixth.
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "flaky", Owner: "crashed"}, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if n := r.Scan(t.Context()); n != 1 || q.len() != 1 || q.jobs[0].Attempt != 1 {
			t.Fatalf("recovered %d: %+v, want one requeue at attempt 1", n, q.jobs)
		}
		if c, _ := reg.Counts(t.Context()); c.Dead != 0 {
			t.Fatalf("dead after failures and one crash: %+v", c)
		}
	})
}

func TestConfigIsValidated(t *testing.T) {
	reg, l := memjobs.New(), testkit.Must(memlock.New())
	rq := func(context.Context, jobs.Job, time.Duration) error { return nil }
	for name, opts := range map[string][]jobs.Option{
		"heartbeat at lease/3":  {jobs.WithTTL(15 * time.Second), jobs.WithHeartbeatInterval(5 * time.Second)},
		"zero lease":            {jobs.WithTTL(0)},
		"negative retries":      {jobs.WithMaxRetries(-1)},
		"cap below base":        {jobs.WithRetryBackoff(time.Minute, time.Second)},
		"zero scan":             {jobs.WithScanInterval(0)},
		"zero batch":            {jobs.WithScanBatch(0)},
		"empty election":        {jobs.WithElection("")},
		"election key too long": {jobs.WithElection(strings.Repeat("e", lock.MaxKeyLen-len(leader.Key(""))+1))},
		// 3 × heartbeat overflowed to a negative duration and passed.
		"overflowing heartbeat": {jobs.WithTTL(time.Hour), jobs.WithHeartbeatInterval(math.MaxInt64/2 + 1)},
		"huge heartbeat":        {jobs.WithTTL(lock.MaxTTL), jobs.WithHeartbeatInterval(math.MaxInt64)},
		"huge scan":             {jobs.WithScanInterval(math.MaxInt64)},
		"nanosecond scan":       {jobs.WithScanInterval(time.Nanosecond)},
		"microsecond heartbeat": {jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(time.Microsecond)},
		"huge backoff cap":      {jobs.WithRetryBackoff(time.Second, math.MaxInt64)},
		"huge retries":          {jobs.WithMaxRetries(math.MaxInt)},
		"huge batch":            {jobs.WithScanBatch(math.MaxInt)},
		"NUL in election":       {jobs.WithElection("a\x00b")},
		"brace in election":     {jobs.WithElection("{jobs}")},
		"long election":         {jobs.WithElection(strings.Repeat("e", lock.MaxNameLen+1))},
	} {
		if _, err := jobs.NewRunner(reg, l, rq, opts...); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	// The runner's owner (WithCommon's, else the Lock's) is recorded as
	// owner and recoverer: an owner that would corrupt a record is refused,
	// whichever it is.
	for _, id := range []string{"host\x1eover", "host\x1f", "host\nforged line"} {
		if _, err := jobs.NewRunner(reg, owned{l, id}, rq); !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(fmt.Sprint(err), "jobs: ") || !strings.Contains(fmt.Sprint(err), "owner") {
			t.Errorf("the Lock's owner %q: %v, want a jobs error matching ErrInvalidArgument naming the owner", id, err)
		}
		if _, err := jobs.NewRunner(reg, l, rq, jobs.WithCommon(lock.Common{Owner: id})); !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(fmt.Sprint(err), "jobs: ") || !strings.Contains(fmt.Sprint(err), "owner") {
			t.Errorf("WithCommon's owner %q: %v, want a jobs error matching ErrInvalidArgument naming the owner", id, err)
		}
	}
	// Leases: within lock.MaxTTL and the election lock's limits, refused
	// as ErrInvalidTTL.
	short := limited{l, lock.Limits{MaxTTL: time.Minute}}
	for name, tc := range map[string]struct {
		l    lock.Lock
		opts []jobs.Option
	}{
		"max int64 lease":            {l, []jobs.Option{jobs.WithTTL(math.MaxInt64)}},
		"lease above lock.MaxTTL":    {l, []jobs.Option{jobs.WithTTL(lock.MaxTTL + time.Millisecond)}},
		"lease below a millisecond":  {l, []jobs.Option{jobs.WithTTL(time.Microsecond)}},
		"lease above the lock's max": {short, []jobs.Option{jobs.WithTTL(2 * time.Minute)}},
		"negative lease":             {l, []jobs.Option{jobs.WithTTL(-time.Second)}},
	} {
		if _, err := jobs.NewRunner(reg, tc.l, rq, tc.opts...); !errors.Is(err, lock.ErrInvalidTTL) || !strings.Contains(fmt.Sprint(err), "WithTTL") {
			t.Errorf("%s: %v, want ErrInvalidTTL naming WithTTL", name, err)
		}
	}
	for _, name := range []string{"", "a\x00b", strings.Repeat("e", lock.MaxNameLen+1)} {
		if _, err := jobs.NewRunner(reg, l, rq, jobs.WithElection(name)); err == nil || !strings.Contains(err.Error(), "election name") {
			t.Errorf("election %.10q…: %v, want an error naming the election name", name, err)
		}
	}
	// The longest valid name; the longest lease.
	if _, err := jobs.NewRunner(reg, l, rq, jobs.WithElection(strings.Repeat("e", lock.MaxNameLen))); err != nil {
		t.Errorf("an election name at the limit: %v", err)
	}
	if _, err := jobs.NewRunner(reg, l, rq, jobs.WithTTL(lock.MaxTTL), jobs.WithHeartbeatInterval((lock.MaxTTL-backendkit.DriftAllowance(lock.MaxTTL))/3-1),
		jobs.WithScanInterval(lock.MaxTTL), jobs.WithRetryBackoff(lock.MaxTTL, lock.MaxTTL), jobs.WithMaxRetries(jobs.MaxAttempt),
		jobs.WithScanBatch(jobs.MaxScanBatch)); err != nil {
		t.Errorf("the largest settings: %v", err)
	}
	if _, err := jobs.NewRunner(nil, l, rq); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("nil registry: %v", err)
	}
	// Seconds instead of the defaults' 20 s are fine.
	if _, err := jobs.NewRunner(reg, l, rq, jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(300*time.Millisecond), jobs.WithScanInterval(200*time.Millisecond)); err != nil {
		t.Errorf("a fast configuration: %v", err)
	}
}

// limited is a Lock that states its limits.
type limited struct {
	lock.Lock
	lim lock.Limits
}

func (l limited) Limits() lock.Limits { return l.lim }

// owned is a Lock with the given owner identity.
type owned struct {
	lock.Lock
	owner string
}

func (o owned) Owner() string { return o.owner }

// stalledHeartbeats is a registry whose Heartbeat hangs until its context
// ends, as on a server that stopped answering.
type stalledHeartbeats struct{ jobs.Registry }

func (stalledHeartbeats) Heartbeat(ctx context.Context, _ []jobs.Ref, _ time.Duration) ([]string, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A job's context ends when its lease does, also while heartbeats hang:
// each heartbeat call is bounded by the first lease end, not only by the
// heartbeat interval (it was; the job then ended up to one interval late).
func TestJobEndsAtItsLeaseWhileHeartbeatsHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := stalledHeartbeats{memjobs.New()}, testkit.Must(memlock.New())
		var q queue
		const lease, every = 3500 * time.Millisecond, time.Second
		worker := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithTTL(lease), jobs.WithHeartbeatInterval(every))
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		go worker.Run(ctx)
		start := time.Now()
		jctx, _, err := worker.Track(t.Context(), jobs.Job{ID: "j"})
		if err != nil {
			t.Fatal(err)
		}
		<-jctx.Done()
		if d, want := time.Since(start), lease-backendkit.DriftAllowance(lease); d != want {
			t.Fatalf("job context ended %v after Track, want at its lease end (less the drift allowance), %v", d, want)
		}
	})
}

// A runner's owner is WithCommon's when it is given one, whatever the
// Lock's (unlike a leader's term, whose owner is its grant's): it is
// recorded with the jobs it tracks and as the recoverer of the jobs it
// recovers, and its recovery election still runs (on the Lock's owner).
// Without WithCommon it is the Lock's owner, or a default one when the Lock
// states none.
func TestConfiguredOwnerIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := memjobs.New()
		l := testkit.Must(memlock.New(memlock.WithCommon(lock.Common{Owner: "lock-owner"})))
		var q queue
		if got := newRunner(t, reg, l, &q).Owner(); got != "lock-owner" {
			t.Errorf("no configured owner: Owner %q, want the Lock's %q", got, "lock-owner")
		}
		if got := newRunner(t, reg, struct{ lock.Lock }{l}, &q).Owner(); got == "" || got == "lock-owner" {
			t.Errorf("a Lock that states no owner, none configured: Owner %q, want a default one (lock.NewOwner)", got)
		}
		if got := newRunner(t, reg, struct{ lock.Lock }{l}, &q, jobs.WithCommon(lock.Common{Owner: "runner-1"})).Owner(); got != "runner-1" {
			t.Errorf("a Lock that states no owner, one configured: Owner %q, want %q", got, "runner-1")
		}

		r := newRunner(t, reg, l, &q, jobs.WithCommon(lock.Common{Owner: "runner-1"}), jobs.WithCommon(lock.Common{}),
			jobs.WithTTL(3*time.Second), jobs.WithHeartbeatInterval(900*time.Millisecond), jobs.WithScanInterval(time.Second))
		if got := r.Owner(); got != "runner-1" {
			t.Fatalf("configured owner: Owner %q, want %q (two WithCommon merge)", got, "runner-1")
		}
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		ran := make(chan error, 1)
		go func() { ran <- r.Run(ctx) }()
		if _, _, err := r.Track(t.Context(), jobs.Job{ID: "mine"}); err != nil {
			t.Fatal(err)
		}
		in, err := reg.InFlight(t.Context(), 10)
		if err != nil || len(in) != 1 || in[0].Owner != "runner-1" {
			t.Fatalf("in flight: %+v, %v; want job mine owned by runner-1", in, err)
		}
		// A crashed worker's job: r leads the recovery election and
		// recovers it, as runner-1.
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "orphan", Owner: "crashed"}, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if q.len() != 1 || q.jobs[0].ID != "orphan" || len(q.jobs[0].History) != 1 ||
			q.jobs[0].History[0].From != "crashed" || q.jobs[0].History[0].By != "runner-1" {
			t.Fatalf("requeued %+v, want orphan recovered from crashed by runner-1", q.jobs)
		}
		select {
		case err := <-ran:
			t.Fatalf("Run returned %v while its context was live", err)
		default:
		}
		stop()
		if err := <-ran; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

// halfHeartbeats is a registry whose heartbeats fail for the jobs listed
// in failing, as a heartbeat sent in chunks of which one failed: it
// extends the others and names the failing ones in a *jobs.HeartbeatError.
type halfHeartbeats struct {
	jobs.Registry
	failing map[string]bool
}

func (h halfHeartbeats) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	var ok []jobs.Ref
	var unknown []string
	for _, ref := range refs {
		if h.failing[ref.ID] {
			unknown = append(unknown, ref.ID)
		} else {
			ok = append(ok, ref)
		}
	}
	lost, err := h.Registry.Heartbeat(ctx, ok, lease)
	if err != nil {
		return nil, err
	}
	return lost, &jobs.HeartbeatError{Unknown: unknown, Err: backendkit.Unavailable("heartbeat", errors.New("chunk failed"))}
}

// A heartbeat that fails in part (jobs.HeartbeatError) renews the jobs of
// the chunks that answered, and the others keep their lease end: the job
// whose chunk always fails ends at its lease, the other one lives on.
func TestPartlyFailedHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := halfHeartbeats{memjobs.New(), map[string]bool{"failing": true}}, testkit.Must(memlock.New())
		var q queue
		const lease = 3500 * time.Millisecond
		worker := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithTTL(lease), jobs.WithHeartbeatInterval(time.Second))
		start := time.Now()
		failing, _, err := worker.Track(t.Context(), jobs.Job{ID: "failing"})
		if err != nil {
			t.Fatal(err)
		}
		renewed, done, err := worker.Track(t.Context(), jobs.Job{ID: "renewed"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-failing.Done():
		case <-time.After(2 * lease):
			t.Fatal("the job whose heartbeats failed outlived its lease")
		}
		if d, want := time.Since(start), lease-backendkit.DriftAllowance(lease); d != want {
			t.Fatalf("the job whose heartbeats failed ended %v after Track, want at its lease end, %v", d, want)
		}
		if !errors.Is(context.Cause(failing), lock.ErrLost) {
			t.Fatalf("the job whose heartbeats failed: %v, want lock.ErrLost", context.Cause(failing))
		}
		time.Sleep(3 * lease)
		if err := renewed.Err(); err != nil {
			t.Fatalf("the job whose heartbeats answered ended: %v", context.Cause(renewed))
		}
		if err := done(nil); err != nil {
			t.Fatal(err)
		}
	})
}

// flakyDone fails the first Done with an outage, before it reaches the
// registry (a connection refused).
type flakyDone struct {
	*memjobs.Registry
	failed atomic.Bool
}

func (r *flakyDone) Done(ctx context.Context, ref jobs.Ref) error {
	if r.failed.CompareAndSwap(false, true) {
		return backendkit.Unavailable("done", errors.New("connection refused"))
	}
	return r.Registry.Done(ctx, ref)
}

// done, called again after an outage (an unknown outcome), calls the
// registry's Done again and removes the job. It was wrapped in a sync.Once:
// the second call returned nil without calling Done, and the job, reported
// complete, stayed tracked without heartbeats until a scan requeued it.
func TestDoneRetriedAfterAnOutageCompletesTheJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, table := memjobs.New(), testkit.Must(memlock.New())
		reg := &flakyDone{Registry: mem}
		var q queue
		r := newRunner(t, reg, testkit.Must(table.Share()), &q)
		jctx, done, err := r.Track(t.Context(), jobs.Job{ID: "j"})
		if err != nil {
			t.Fatal(err)
		}
		if err := done(nil); !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("first done: %v, want the outage", err)
		}
		if jctx.Err() == nil {
			t.Fatal("the job's context outlived done's first call")
		}
		if err := done(nil); err != nil {
			t.Fatalf("second done: %v", err)
		}
		if c, _ := mem.Counts(t.Context()); c.Tracked != 0 {
			t.Fatalf("done returned nil but the job is still tracked: %+v", c)
		}
		if err := done(nil); err != nil { // the outcome is kept
			t.Fatalf("third done: %v", err)
		}
		time.Sleep(jobs.DefaultTTL + time.Second)
		if n := r.Scan(t.Context()); n != 0 || q.len() != 0 {
			t.Fatalf("a job whose done returned nil was requeued: %d, %+v", n, q.jobs)
		}
	})
}

// hungDone is a registry whose Done hangs until its context ends or hung
// is closed, as on a server that stopped answering.
type hungDone struct {
	*memjobs.Registry
	hung chan struct{}
}

func (r hungDone) Done(ctx context.Context, _ jobs.Ref) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.hung:
		return backendkit.Unavailable("done", errors.New("connection reset"))
	}
}

// done returns once the ttl has passed when the registry's Done hangs,
// whatever its ctx (which it ignores, so that a stopping worker still
// completes its jobs): it ran under context.WithoutCancel alone, with no
// deadline, and hung as long as the server did.
func TestDoneIsBoundedByTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := hungDone{memjobs.New(), make(chan struct{})}
		defer close(reg.hung)
		var q queue
		const ttl = time.Second
		r := newRunner(t, reg, testkit.Must(memlock.New()), &q, jobs.WithTTL(ttl))
		_, done, err := r.Track(t.Context(), jobs.Job{ID: "j"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		returned := make(chan error, 1)
		go func() { returned <- done(nil) }()
		select {
		case err := <-returned:
			if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != ttl {
				t.Fatalf("done returned %v after %v, want the deadline after the ttl, %v", err, time.Since(start), ttl)
			}
		case <-time.After(10 * ttl):
			t.Fatal("done hangs with the registry's Done")
		}
	})
}

// slowTrackReply records the job at once but its reply arrives late.
type slowTrackReply struct {
	*memjobs.Registry
	late  string
	delay time.Duration
}

func (r slowTrackReply) Track(ctx context.Context, job jobs.Job, lease time.Duration) (jobs.Job, error) {
	j, err := r.Registry.Track(ctx, job, lease)
	if job.ID == r.late {
		time.Sleep(r.delay)
	}
	return j, err
}

// A Track whose reply comes late returns a job whose lease ends (by the
// worker's clock) before the heartbeat loop's armed deadline, which
// another job's heartbeats keep far out, and before the next heartbeat.
// The job's context must end at its lease end: the loop armed its deadline
// only at the top of each round, so it ended at the next heartbeat, after
// its lease had ended on the server and a recoverer had requeued it.
func TestLateTrackReplyEndsTheJobAtItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		const delay = 13500 * time.Millisecond
		worker := newRunner(t, slowTrackReply{mem, "late", delay}, testkit.Must(table.Share()), &q)
		recoverer := newRunner(t, mem, testkit.Must(table.Share()), &q)
		// t=0: heartbeats every 3.75 s; the other job's lease end, the
		// loop's deadline, is 14.85 s past the last one (29.85 s at 17 s).
		if _, _, err := worker.Track(t.Context(), jobs.Job{ID: "other"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3500 * time.Millisecond)
		sent := time.Now() // t=3.5 s: recorded until 18.5 s, valid until 18.35 s; reply at 17 s
		jctx, _, err := worker.Track(t.Context(), jobs.Job{ID: "late"})
		if err != nil {
			t.Fatal(err)
		}
		ended := make(chan time.Time, 1)
		context.AfterFunc(jctx, func() { ended <- time.Now() })
		time.Sleep(time.Until(sent.Add(jobs.DefaultTTL + 100*time.Millisecond))) // 18.6 s, before the heartbeat at 18.75 s
		if n := recoverer.Scan(t.Context()); n != 1 {
			t.Fatalf("scan recovered %d, want the late job", n)
		}
		if jctx.Err() == nil {
			t.Fatalf("the job's context is alive %v after its lease ended on the server, and it was requeued",
				time.Since(sent.Add(jobs.DefaultTTL)))
		}
		if d, want := (<-ended).Sub(sent), jobs.DefaultTTL-backendkit.DriftAllowance(jobs.DefaultTTL); d != want {
			t.Fatalf("the job's context ended %v after Track was sent, want at its lease end, %v", d, want)
		}
		if !errors.Is(context.Cause(jctx), lock.ErrLost) {
			t.Fatalf("the job's context: %v, want lock.ErrLost", context.Cause(jctx))
		}
	})
}

// A Track whose reply comes after the job's lease ended by the worker's
// clock returns the job's context already ended (lock.ErrLost). It was
// put in flight like any other: alive until the heartbeat loop's next
// round, up to a heartbeat interval after its lease ended on the server.
func TestTrackReplyAfterTheLeaseEndedLosesTheJobAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		worker := newRunner(t, slowTrackReply{mem, "late", 14900 * time.Millisecond}, testkit.Must(table.Share()), &q)
		if _, _, err := worker.Track(t.Context(), jobs.Job{ID: "other"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		// Recorded at 1 s, until 16 s; valid until 15.85 s; reply at 15.9 s.
		jctx, done, err := worker.Track(t.Context(), jobs.Job{ID: "late"})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(context.Cause(jctx), lock.ErrLost) {
			t.Fatalf("the job's context when Track returned after its lease: %v, want lock.ErrLost", context.Cause(jctx))
		}
		// Its server lease has not ended: done still completes it.
		if err := done(nil); err != nil {
			t.Fatalf("done: %v", err)
		}
	})
}

// NewRunner checks the heartbeat interval against what a job's context
// lives after a heartbeat, the ttl less its drift allowance, and the
// default heartbeat passes that check at every ttl it accepts: a healthy
// worker keeps its jobs. It checked the ttl alone, so that WithTTL(3001µs)
// with a 1 ms heartbeat (0.97 ms of validity) lost every job, and the
// largest heartbeat it took at 20 ms lost them too.
func TestHeartbeatLeavesRoomForTheDriftAllowance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		healthy := func(t *testing.T, ttl time.Duration, opts ...jobs.Option) {
			t.Helper()
			r, err := jobs.NewRunner(reg, testkit.Must(table.Share()), q.requeue, append(opts, jobs.WithTTL(ttl))...)
			if err != nil {
				t.Fatalf("ttl %v %d options: %v", ttl, len(opts), err)
			}
			jctx, done, err := r.Track(t.Context(), jobs.Job{ID: "j"})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * ttl)
			if jctx.Err() != nil {
				t.Fatalf("ttl %v %d options: a job of a healthy worker was lost: %v", ttl, len(opts), context.Cause(jctx))
			}
			if err := done(nil); err != nil {
				t.Fatal(err)
			}
		}
		// The smallest ttl (three 1 ms heartbeats in what the drift
		// allowance leaves), around the ttl/4 switch at 8.3 ms, and others.
		for _, ttl := range []time.Duration{5050506, 5100 * time.Microsecond, 6 * time.Millisecond, 8333333, 8333334,
			9 * time.Millisecond, 20 * time.Millisecond, time.Second, jobs.DefaultTTL} {
			healthy(t, ttl)
			// The largest heartbeat it takes.
			h := (ttl - backendkit.DriftAllowance(ttl) - 1) / 3
			healthy(t, ttl, jobs.WithHeartbeatInterval(h))
			if _, err := jobs.NewRunner(reg, table, q.requeue, jobs.WithTTL(ttl), jobs.WithHeartbeatInterval(h+1)); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("ttl %v, heartbeat %v: %v, want ErrInvalidArgument", ttl, h+1, err)
			}
		}
		for _, ttl := range []time.Duration{time.Millisecond, 3001 * time.Microsecond, 5050505} {
			if _, err := jobs.NewRunner(reg, table, q.requeue, jobs.WithTTL(ttl)); !errors.Is(err, lock.ErrInvalidTTL) || !strings.Contains(fmt.Sprint(err), "WithTTL") {
				t.Errorf("ttl %v, too short for three heartbeats: %v, want ErrInvalidTTL naming WithTTL", ttl, err)
			}
		}
	})
}

// Scan(nil) is refused, logged at Warn, and returns 0, as Run refuses a nil
// context with an error. It panicked.
func TestScanRefusesANilContext(t *testing.T) {
	h := &records{}
	var q queue
	r := newRunner(t, memjobs.New(), testkit.Must(memlock.New()), &q, jobs.WithCommon(lock.Common{Logger: slog.New(h)}))
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Scan(nil) panicked: %v", p)
		}
	}()
	//lint:ignore SA1012 the odd input under test
	if n := r.Scan(nil); n != 0 { //nolint:staticcheck
		t.Fatalf("Scan(nil) = %d", n)
	}
	if got, ok := h.find("leasehold: recovery scan refused"); !ok || got["level"] != "WARN" || !strings.Contains(got["err"], "nil context") {
		t.Fatalf("Scan(nil) logged %v, want a Warn naming the nil context", got)
	}
}
