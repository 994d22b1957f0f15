package jobs_test

import (
	"context"
	"fmt"
	"log"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// idQueue is a queue as most queues store jobs: ID and payload, nothing of
// the job's Attempt, History or MaxRetries.
type idQueue struct{ q queue }

func (q *idQueue) requeue(ctx context.Context, j jobs.Job, delay time.Duration) error {
	return q.q.requeue(ctx, jobs.Job{ID: j.ID, Payload: j.Payload}, delay)
}

// take pops the jobs requeued so far.
func (q *idQueue) take() []jobs.Job {
	q.q.mu.Lock()
	defer q.q.mu.Unlock()
	out := q.q.jobs
	q.q.jobs, q.q.at = nil, nil
	return out
}

// crash has a worker of r track j and die mid-job: the job's context ends
// without done, and nothing heartbeats it any more.
func crash(t *testing.T, r *jobs.Runner, j jobs.Job) {
	t.Helper()
	ctx, die := context.WithCancel(t.Context())
	if _, _, err := r.Track(ctx, j); err != nil {
		t.Fatal(err)
	}
	die()
	synctest.Wait()
}

// poisonRun has the recoverer scan after each ttl, and workers of crashing
// take every requeued job off q, track it as the queue gives it and crash,
// for at most rounds rounds or until want jobs are dead.
func poisonRun(t *testing.T, crashing, recoverer *jobs.Runner, q *idQueue, want, rounds int, dead map[string]jobs.DeadJob) {
	t.Helper()
	for round := 0; len(dead) < want && round < rounds; round++ {
		time.Sleep(jobs.DefaultTTL + time.Second)
		recoverer.Scan(t.Context())
		for _, j := range q.take() {
			crash(t, crashing, j)
		}
	}
}

func crashingAndRecoverer(t *testing.T, reg jobs.Registry, q *idQueue, dead map[string]jobs.DeadJob, opts ...jobs.Option) (*jobs.Runner, *jobs.Runner) {
	t.Helper()
	table := testkit.Must(memlock.New())
	crashing, err := jobs.NewRunner(reg, testkit.Must(table.Share(memlock.WithCommon(lock.Common{Owner: "crashing"}))), q.requeue)
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, jobs.OnDead(func(_ context.Context, d jobs.DeadJob) { dead[d.ID] = d }))
	recoverer, err := jobs.NewRunner(reg, testkit.Must(table.Share(memlock.WithCommon(lock.Common{Owner: "recoverer"}))), q.requeue, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return crashing, recoverer
}

// A poison job whose queue carries only its ID and payload — so that every
// worker tracks it with Attempt 0 — still reaches the dead set after
// MaxRetries recoveries: the registry keeps the count by ID. (Before, each
// Track restarted the count at 0: the job crashed its workers forever and
// never reached the dead set.)
func TestPoisonJobCountsWhateverItsQueueCarries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := memjobs.New()
		var q idQueue
		dead := map[string]jobs.DeadJob{}
		crashing, recoverer := crashingAndRecoverer(t, reg, &q, dead, jobs.WithMaxRetries(3))
		crash(t, crashing, jobs.Job{ID: "poison", Payload: []byte("p")})
		poisonRun(t, crashing, recoverer, &q, 1, 10, dead)
		d, ok := dead["poison"]
		if !ok || d.Attempt != 4 || len(d.History) != 4 || string(d.Payload) != "p" {
			t.Fatalf("dead %+v; want the job dead at attempt 4 after its 3 retries, 4 recoveries in its history", dead)
		}
		for i, h := range d.History {
			if h.Attempt != i+1 || h.By != "recoverer" {
				t.Fatalf("history %+v", d.History)
			}
		}
		if n := len(q.take()); n != 0 {
			t.Fatalf("%d jobs still queued after the poison job died", n)
		}
	})
}

// A job's own MaxRetries overrides the runner's (WithMaxRetries), in both
// directions, and is kept by the registry when the queue drops it.
func TestPerJobMaxRetriesOverridesTheRunners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := memjobs.New()
		var q idQueue
		dead := map[string]jobs.DeadJob{}
		crashing, recoverer := crashingAndRecoverer(t, reg, &q, dead, jobs.WithMaxRetries(3))
		for id, max := range map[string]int{"fewer": 1, "more": 6, "runner's": 0} {
			crash(t, crashing, jobs.Job{ID: id, MaxRetries: max})
		}
		poisonRun(t, crashing, recoverer, &q, 3, 20, dead)
		for id, attempt := range map[string]int{"fewer": 2, "more": 7, "runner's": 4} {
			if d, ok := dead[id]; !ok || d.Attempt != attempt {
				t.Errorf("%s: dead %v at attempt %d, want dead at attempt %d", id, ok, d.Attempt, attempt)
			}
		}
	})
}

// A job tracked as Job{ID, Payload} after its recovery keeps the count the
// registry holds for its ID, and its own MaxRetries.
func ExampleJob_maxRetries() {
	ctx := context.Background()
	reg := memjobs.New()
	// A worker starts a job that may be retried twice, and crashes.
	j, err := reg.Track(ctx, jobs.Job{ID: "invoice-7", Payload: []byte("…"), Owner: "worker-1", MaxRetries: 2}, time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	// The recoverer (a Runner's scan) reclaims it, requeues it and removes it.
	for {
		expired, err := reg.Expired(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		if len(expired) == 1 {
			break
		}
		<-time.After(time.Millisecond)
	}
	c, err := reg.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Remove(ctx, c.Ref()); err != nil {
		log.Fatal(err)
	}
	// The queue hands back ID and payload only; the registry still counts,
	// for jobs.RetryWindow.
	again, err := reg.Track(ctx, jobs.Job{ID: "invoice-7", Payload: []byte("…"), Owner: "worker-2"}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("attempt %d of at most %d retries, recovered from %s\n", again.Attempt, again.MaxRetries, again.History[0].From)
	// Output: attempt 1 of at most 2 retries, recovered from worker-1
}

// The context Track returns carries the job as the registry recorded it:
// a job tracked again as Job{ID, Payload} after a recovery shows Attempt 1
// and the recovery in its History, so that its handler knows it may have
// run in part before.
func TestJobFromCarriesTheRecordedAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := memjobs.New()
		var q idQueue
		crashing, recoverer := crashingAndRecoverer(t, reg, &q, map[string]jobs.DeadJob{})
		ctx, done, err := crashing.Track(t.Context(), jobs.Job{ID: "j", Payload: []byte("p")})
		if err != nil {
			t.Fatal(err)
		}
		if j, ok := jobs.JobFrom(ctx); !ok || j.ID != "j" || j.Attempt != 0 || j.Owner != "crashing" {
			t.Fatalf("JobFrom of the first run: %+v, %v", j, ok)
		}
		_ = done // the worker dies without it
		if _, ok := jobs.JobFrom(t.Context()); ok {
			t.Fatal("JobFrom of a context that Track did not return")
		}
		crash(t, crashing, jobs.Job{ID: "j", Payload: []byte("p")})
		time.Sleep(jobs.DefaultTTL + time.Second)
		recoverer.Scan(t.Context())
		requeued := q.take()
		if len(requeued) != 1 {
			t.Fatalf("requeued %v", requeued)
		}
		ctx, done, err = crashing.Track(t.Context(), requeued[0])
		if err != nil {
			t.Fatal(err)
		}
		defer done(nil)
		j, ok := jobs.JobFrom(ctx)
		if !ok || j.Attempt != 1 || len(j.History) != 1 || j.History[0].By != "recoverer" || string(j.Payload) != "p" {
			t.Fatalf("JobFrom after a recovery: %+v, %v; want Attempt 1 and its recovery", j, ok)
		}
	})
}
