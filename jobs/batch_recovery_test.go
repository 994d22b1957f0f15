package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// batchCounting is memjobs counting its batched and single recovery calls
// (the sizes of the batches); answerLess drops that many answers of each
// batch (a registry that answers short), answerMore adds that many (one
// that answers long).
type batchCounting struct {
	*memjobs.Registry
	answerLess, answerMore int

	mu                sync.Mutex
	reclaimEach       []int
	removeEach        []int
	reclaims, removes int
}

func (r *batchCounting) ReclaimEach(ctx context.Context, refs []jobs.Ref, by string, lease time.Duration) []jobs.Reclaimed {
	r.mu.Lock()
	r.reclaimEach = append(r.reclaimEach, len(refs))
	r.mu.Unlock()
	out := r.Registry.ReclaimEach(ctx, refs, by, lease)
	for range r.answerMore {
		out = append(out, jobs.Reclaimed{Job: jobs.Job{ID: "not asked for", Epoch: 1}})
	}
	return out[:max(len(out)-r.answerLess, 0)]
}

func (r *batchCounting) RemoveEach(ctx context.Context, refs []jobs.Ref) []error {
	r.mu.Lock()
	r.removeEach = append(r.removeEach, len(refs))
	r.mu.Unlock()
	out := r.Registry.RemoveEach(ctx, refs)
	out = append(out, make([]error, r.answerMore)...)
	return out[:max(len(out)-r.answerLess, 0)]
}

func (r *batchCounting) Reclaim(ctx context.Context, ref jobs.Ref, by string, lease time.Duration) (jobs.Job, error) {
	r.mu.Lock()
	r.reclaims++
	r.mu.Unlock()
	return r.Registry.Reclaim(ctx, ref, by, lease)
}

func (r *batchCounting) Remove(ctx context.Context, ref jobs.Ref) error {
	r.mu.Lock()
	r.removes++
	r.mu.Unlock()
	return r.Registry.Remove(ctx, ref)
}

// stepLog records each job's recovery steps, in order.
type stepLog struct {
	mu    sync.Mutex
	steps map[string][]jobs.Step
}

func (l *stepLog) record(s jobs.Step, j jobs.Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.steps == nil {
		l.steps = map[string][]jobs.Step{}
	}
	l.steps[j.ID] = append(l.steps[j.ID], s)
}

// A scan over a BatchRecoverer reclaims and removes in chunks of
// RecoveryChunk, one call each, and nothing one job at a time; within a
// chunk each job goes through its own steps in order: requeued and
// removed, buried (past its MaxRetries: not removed), or left reclaimed
// when its Requeue failed — in flight under the recoverer's epoch, which
// a scan after the ttl recovers.
func TestScanRecoversInChunks(t *testing.T) {
	for _, c := range []int{1, 4} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := &batchCounting{Registry: memjobs.New()}
				const n = 2*jobs.RecoveryChunk + jobs.RecoveryChunk/2
				kind := func(i int) string {
					switch {
					case i%25 == 3:
						return "bury"
					case i%50 == 7:
						return "fail"
					}
					return "requeue"
				}
				want := map[string]int{}
				for i := range n {
					j := jobs.Job{ID: fmt.Sprintf("%s-%03d", kind(i), i)}
					if kind(i) == "bury" {
						j.Attempt, j.MaxRetries = 2, 2 // its next recovery is past its retries
					}
					if _, err := reg.Track(t.Context(), j, time.Second); err != nil {
						t.Fatal(err)
					}
					want[kind(i)]++
				}
				time.Sleep(2 * time.Second) // every lease has ended
				var (
					mu       sync.Mutex
					requeued = map[string]int{}
					dead     []string
				)
				failing := true
				requeue := func(_ context.Context, j jobs.Job, _ time.Duration) error {
					mu.Lock()
					defer mu.Unlock()
					if failing && strings.HasPrefix(j.ID, "fail-") {
						return errors.New("queue refused it")
					}
					requeued[j.ID]++
					return nil
				}
				var steps stepLog
				runner, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), requeue, jobs.WithTTL(time.Second),
					jobs.WithRecoveryConcurrency(c), jobs.OnStep(steps.record),
					jobs.OnDead(func(_ context.Context, d jobs.DeadJob) { mu.Lock(); dead = append(dead, d.ID); mu.Unlock() }))
				if err != nil {
					t.Fatal(err)
				}
				if got := runner.Scan(t.Context()); got != want["requeue"] {
					t.Fatalf("Scan recovered %d, want %d", got, want["requeue"])
				}
				if !slices.Equal(reg.reclaimEach, []int{jobs.RecoveryChunk, jobs.RecoveryChunk, jobs.RecoveryChunk / 2}) {
					t.Errorf("ReclaimEach batches %v, want chunks of %d", reg.reclaimEach, jobs.RecoveryChunk)
				}
				if len(reg.removeEach) != 3 || reg.reclaims+reg.removes != 0 {
					t.Errorf("RemoveEach batches %v, single Reclaims %d and Removes %d; want 3 batches and no single call", reg.removeEach, reg.reclaims, reg.removes)
				}
				for id, s := range steps.steps {
					var w []jobs.Step
					switch id[:strings.IndexByte(id, '-')] {
					case "bury":
						w = []jobs.Step{jobs.StepReclaimed, jobs.StepBuried}
					case "fail":
						w = []jobs.Step{jobs.StepReclaimed}
					default:
						w = []jobs.Step{jobs.StepReclaimed, jobs.StepRequeued, jobs.StepRemoved}
						if requeued[id] != 1 {
							t.Errorf("%s requeued %d times", id, requeued[id])
						}
					}
					if !slices.Equal(s, w) {
						t.Errorf("%s went through %v, want %v", id, s, w)
					}
				}
				if len(steps.steps) != n || len(dead) != want["bury"] {
					t.Fatalf("%d jobs went through steps, %d buried; want %d, %d", len(steps.steps), len(dead), n, want["bury"])
				}
				c, err := reg.Counts(t.Context())
				if err != nil || c.Tracked != int64(want["fail"]) || c.Dead != int64(want["bury"]) {
					t.Fatalf("after the scan: %+v, %v; want the %d whose Requeue failed in flight", c, err, want["fail"])
				}
				// The jobs whose Requeue failed expire again, and the next scan
				// requeues them (their second recovery).
				failing = false
				time.Sleep(2 * time.Second)
				if got := runner.Scan(t.Context()); got != want["fail"] {
					t.Fatalf("the second scan recovered %d, want %d", got, want["fail"])
				}
				if c, _ := reg.Counts(t.Context()); c.Tracked != 0 {
					t.Fatalf("after the second scan: %+v", c)
				}
			})
		})
	}
}

// A registry that answers a batch short or long. Short: the jobs it did
// not answer for are unknown (ErrUnavailable), not recovered nor lost;
// those whose ReclaimEach answer is missing stay reclaimed, in flight, and
// the scan after the ttl recovers them, and a missing RemoveEach answer is
// a Remove that failed (the job was requeued: it may be requeued again).
// Long: the answers past the refs are dropped (a scan read them as the
// answers of jobs it did not send, past the end of its chunk).
func TestScanOverMisansweredBatches(t *testing.T) {
	for _, tc := range []struct {
		name            string
		less, more      int
		first, requeued int // recovered and requeued by the first scan
	}{
		// Four answered reclaims, four requeues, three answered removes;
		// the second scan recovers the job whose reclaim was unanswered.
		{"short", 1, 0, 4, 4},
		{"long", 0, 2, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reg := &batchCounting{Registry: memjobs.New(), answerLess: tc.less, answerMore: tc.more}
				const n = 5
				runner, q := expiredForScan(t, reg, reg, n)
				if got := runner.Scan(t.Context()); got != tc.first || q.len() != tc.requeued {
					t.Fatalf("Scan recovered %d and requeued %d, want %d and %d", got, q.len(), tc.first, tc.requeued)
				}
				reg.answerLess, reg.answerMore = 0, 0
				time.Sleep(2 * time.Second)
				if got := runner.Scan(t.Context()); got != n-tc.first {
					t.Fatalf("the second scan recovered %d, want %d", got, n-tc.first)
				}
				seen := map[string]bool{}
				for _, j := range q.jobs {
					seen[j.ID] = true
				}
				if len(seen) != n {
					t.Fatalf("requeued %v, want all %d jobs", seen, n)
				}
				if c, _ := reg.Counts(t.Context()); c.Tracked != 0 {
					t.Fatalf("entries left: %+v", c)
				}
			})
		})
	}
}

// A scan cut short (its context ends in the middle of a chunk, here in
// the fifth Requeue, which succeeds) still removes the jobs it requeued:
// a later scan requeues only those it had not, each job once in all. In
// batches and one at a time, the Remove went under the ended context,
// failed, and left the requeued jobs to be requeued again after the ttl.
func TestScanCutShortRemovesWhatItRequeued(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memjobs.New()
				var reg jobs.Registry = mem
				if !batched {
					reg = struct{ jobs.Registry }{mem}
				}
				const n, cut = 20, 5
				for i := range n {
					if _, err := mem.Track(t.Context(), jobs.Job{ID: fmt.Sprintf("job-%02d", i)}, time.Second); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(2 * time.Second)
				scanCtx, stop := context.WithCancel(t.Context())
				requeued := map[string]int{}
				requeue := func(ctx context.Context, j jobs.Job, _ time.Duration) error {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					requeued[j.ID]++
					if len(requeued) == cut {
						stop() // a shutdown, after this Requeue took effect
					}
					return nil
				}
				runner, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), requeue, jobs.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if got := runner.Scan(scanCtx); got != cut {
					t.Fatalf("the scan cut short recovered %d, want %d", got, cut)
				}
				if c, _ := mem.Counts(t.Context()); c.Tracked != n-cut {
					t.Fatalf("after the scan cut short: %+v; want the %d jobs it did not requeue", c, n-cut)
				}
				time.Sleep(2 * time.Second)
				if got := runner.Scan(t.Context()); got != n-cut {
					t.Fatalf("the next scan recovered %d, want %d", got, n-cut)
				}
				for i := range n {
					if id := fmt.Sprintf("job-%02d", i); requeued[id] != 1 {
						t.Errorf("%s requeued %d times", id, requeued[id])
					}
				}
			})
		})
	}
}

// slowRemoves is memjobs whose RemoveEach takes d, or fails when its
// context ends first.
type slowRemoves struct {
	*memjobs.Registry
	d time.Duration
}

func (r slowRemoves) RemoveEach(ctx context.Context, refs []jobs.Ref) []error {
	select {
	case <-time.After(r.d):
		return r.Registry.RemoveEach(ctx, refs)
	case <-ctx.Done():
		out := make([]error, len(refs))
		for i := range out {
			out[i] = ctx.Err()
		}
		return out
	}
}

func (r slowRemoves) Remove(ctx context.Context, ref jobs.Ref) error {
	return r.RemoveEach(ctx, []jobs.Ref{ref})[0]
}

// The Removes of a scan take as long as they take while its context
// lives, and at most a second more once it ends (a shutdown waits no
// longer for a registry that does not answer); the ttl bounds them in any
// case. In batches (one RemoveEach of the three jobs) and one at a time
// (a Remove of each: three in turn).
func TestScanRemovesWithinItsGrace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		single bool
		cut    bool
		remove time.Duration
		want   time.Duration // the scan's duration, on synctest's clock
	}{
		{"slow-server", false, false, 5 * time.Second, 5 * time.Second},
		{"cut-short", false, true, time.Hour, time.Second},
		{"past-the-ttl", false, false, time.Hour, 10 * time.Second},
		{"single/slow-server", true, false, 5 * time.Second, 15 * time.Second},
		{"single/cut-short", true, true, time.Hour, time.Second}, // the scan stops after the first job
		{"single/past-the-ttl", true, false, time.Hour, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var reg jobs.Registry = slowRemoves{memjobs.New(), tc.remove}
				if tc.single {
					reg = struct{ jobs.Registry }{reg} // Remove, no RemoveEach
				}
				for i := range 3 {
					if _, err := reg.Track(t.Context(), jobs.Job{ID: fmt.Sprint("job-", i)}, time.Second); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(2 * time.Second)
				scanCtx, stop := context.WithCancel(t.Context())
				defer stop()
				requeue := func(context.Context, jobs.Job, time.Duration) error {
					if tc.cut {
						stop()
					}
					return nil
				}
				runner, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), requeue, jobs.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				runner.Scan(scanCtx)
				if took := time.Since(start); took != tc.want {
					t.Fatalf("the scan took %v, want %v", took, tc.want)
				}
			})
		})
	}
}

// expiredForScan tracks n jobs on mem (of a ttl of a second) and lets
// them expire (in a synctest bubble), and returns a Runner over reg (mem,
// or a wrapper of it) with that ttl, and its queue.
func expiredForScan(t *testing.T, mem jobs.Registry, reg jobs.Registry, n int) (*jobs.Runner, *queue) {
	t.Helper()
	for i := range n {
		if _, err := mem.Track(t.Context(), jobs.Job{ID: fmt.Sprintf("job-%d", i)}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	q := &queue{}
	runner, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), q.requeue, jobs.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return runner, q
}

// A wrapper of a registry that hides BatchRecoverer gets the scan one job
// at a time: the batched calls are optional.
func TestScanWithoutBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &batchCounting{Registry: memjobs.New()}
		runner, _ := expiredForScan(t, inner, struct{ jobs.Registry }{inner}, 3)
		if got := runner.Scan(t.Context()); got != 3 || inner.reclaims != 3 || inner.removes != 3 || len(inner.reclaimEach)+len(inner.removeEach) != 0 {
			t.Fatalf("Scan recovered %d with %d Reclaims, %d Removes and batches %v %v; want 3 of each, no batch",
				got, inner.reclaims, inner.removes, inner.reclaimEach, inner.removeEach)
		}
	})
}
