package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// overlapQueue is a Requeue that records each job it is handed and the
// most calls it saw at once. Its first `gather` calls wait until all of
// them have arrived (or until the test's deadline), so that a scan with
// that much concurrency is seen to reach it.
type overlapQueue struct {
	gather   int
	arrived  atomic.Int64
	all      chan struct{} // closed when gather calls have arrived
	deadline <-chan struct{}

	inFlight, most atomic.Int64
	mu             sync.Mutex
	ids            map[string]int
}

func newOverlapQueue(t *testing.T, gather int) *overlapQueue {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return &overlapQueue{gather: gather, all: make(chan struct{}), deadline: ctx.Done(), ids: map[string]int{}}
}

func (q *overlapQueue) requeue(_ context.Context, j jobs.Job, _ time.Duration) error {
	n := q.inFlight.Add(1)
	defer q.inFlight.Add(-1)
	for m := q.most.Load(); n > m && !q.most.CompareAndSwap(m, n); m = q.most.Load() {
	}
	if a := q.arrived.Add(1); a <= int64(q.gather) {
		if a == int64(q.gather) {
			close(q.all)
		}
		select {
		case <-q.all:
		case <-q.deadline:
			return errors.New("the other recoveries never came")
		}
	}
	q.mu.Lock()
	q.ids[j.ID]++
	q.mu.Unlock()
	return nil
}

// expireJobs tracks n jobs on reg with a lease of a millisecond and
// returns their IDs once the registry lists them all as expired.
func expireJobs(t *testing.T, reg jobs.Registry, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%02d", i)
		if _, err := reg.Track(ctx, jobs.Job{ID: ids[i], Payload: []byte("p")}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for { // the leases end by the server's clock
		js, err := reg.Expired(ctx, 2*n)
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == n {
			return ids
		}
	}
}

// WithRecoveryConcurrency(c) recovers up to c expired jobs at once, on
// every registry, in batches or one job at a time: with c = 4, Requeue is
// seen 4 times at once and never more; with the default, once at a time. Either way every job is requeued
// exactly once and its entry removed, and Scan returns the count.
func TestRecoveryConcurrency(t *testing.T) {
	type registry struct {
		name string
		open func(t *testing.T) jobs.Registry
	}
	regs := []registry{{"memory", func(*testing.T) jobs.Registry { return memjobs.New() }}}
	for _, s := range stores(t) {
		regs = append(regs, registry{s.name, func(t *testing.T) jobs.Registry { return s.open(t, nsFor(t)) }})
	}
	// Each also as a registry that is no BatchRecoverer: recovered one job
	// at a time.
	for _, r := range regs[:len(regs):len(regs)] {
		regs = append(regs, registry{r.name + "/single", func(t *testing.T) jobs.Registry {
			reg := r.open(t)
			return struct {
				jobs.Registry
				jobs.Inspector
			}{reg, reg.(jobs.Inspector)}
		}})
	}
	const expired = 24
	for _, r := range regs {
		for _, c := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/%d", r.name, c), func(t *testing.T) {
				t.Parallel()
				reg := r.open(t)
				ids := expireJobs(t, reg, expired)
				q := newOverlapQueue(t, c)
				var opts []jobs.Option
				if c > 1 {
					opts = append(opts, jobs.WithRecoveryConcurrency(c))
				}
				runner, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), q.requeue, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if n := runner.Scan(t.Context()); n != expired {
					t.Fatalf("Scan recovered %d of %d", n, expired)
				}
				if m := q.most.Load(); m != int64(c) {
					t.Errorf("at most %d Requeue calls at once, want %d", m, c)
				}
				for _, id := range ids {
					if q.ids[id] != 1 {
						t.Errorf("%s requeued %d times", id, q.ids[id])
					}
				}
				left, err := reg.(jobs.Inspector).InFlight(t.Context(), 2*expired)
				if err != nil || len(left) != 0 {
					t.Fatalf("entries left after the scan: %v, %v", left, err)
				}
			})
		}
	}
}

// countingRegistry counts the Reclaims made through it: one per recovery
// started.
type countingRegistry struct {
	jobs.Registry
	reclaims atomic.Int64
}

func (r *countingRegistry) Reclaim(ctx context.Context, ref jobs.Ref, by string, lease time.Duration) (jobs.Job, error) {
	r.reclaims.Add(1)
	return r.Registry.Reclaim(ctx, ref, by, lease)
}

// A scan whose context ends starts no more recoveries, waits for those it
// started, and loses nothing: a recovery cut short leaves its job
// reclaimed, and a later scan recovers it and the jobs not yet started.
func TestCancelledConcurrentScan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := &countingRegistry{Registry: memjobs.New()}
		const n, c = 20, 4
		for i := range n {
			if _, err := reg.Track(t.Context(), jobs.Job{ID: fmt.Sprintf("job-%02d", i)}, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Second) // every lease has ended
		scanCtx, stop := context.WithCancel(t.Context())
		var (
			mu       sync.Mutex
			started  int
			requeued = map[string]int{}
		)
		requeue := func(ctx context.Context, j jobs.Job, _ time.Duration) error {
			mu.Lock()
			started++
			first := started == 1
			mu.Unlock()
			if first {
				stop() // a shutdown in the middle of the scan
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			mu.Lock()
			requeued[j.ID]++
			mu.Unlock()
			return nil
		}
		runner, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), requeue, jobs.WithRecoveryConcurrency(c), jobs.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		firstScan := runner.Scan(scanCtx)
		// Until the first Requeue no recovery has ended, so at most c had
		// started when it cancelled the scan.
		if got := reg.reclaims.Load(); got > c {
			t.Fatalf("the cancelled scan started %d recoveries; at most %d had started when it was cancelled", got, c)
		}
		time.Sleep(2 * time.Second) // the reclaimed entries' leases end
		if firstScan >= n {
			t.Fatalf("the cancelled scan recovered all %d jobs", firstScan)
		}
		if got := runner.Scan(t.Context()); firstScan+got != n {
			t.Fatalf("the cancelled scan recovered %d, the second %d: want %d in all", firstScan, got, n)
		}
		for i := range n {
			if id := fmt.Sprintf("job-%02d", i); requeued[id] != 1 {
				t.Errorf("%s requeued %d times", id, requeued[id])
			}
		}
	})
}

func TestRecoveryConcurrencyIsValidated(t *testing.T) {
	for _, c := range []int{0, -1, jobs.MaxRecoveryConcurrency + 1} {
		_, err := jobs.NewRunner(memjobs.New(), testkit.Must(memlock.New()), (&queue{}).requeue, jobs.WithRecoveryConcurrency(c))
		if err == nil {
			t.Errorf("WithRecoveryConcurrency(%d) accepted", c)
		}
	}
	if _, err := jobs.NewRunner(memjobs.New(), testkit.Must(memlock.New()), (&queue{}).requeue, jobs.WithRecoveryConcurrency(jobs.MaxRecoveryConcurrency)); err != nil {
		t.Fatal(err)
	}
}
