package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// TestReviveThenScanRequeues: a dead job revived (as the CLI does, without
// a Requeue) leaves the dead set, and the application's next recovery scan
// requeues it through the application's Requeue with Attempt 1 (one
// recovery since the revival).
func TestReviveThenScanRequeues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		reg := memjobs.New()
		q := &queue{}
		r, err := jobs.NewRunner(reg, testkit.Must(memlock.New()), q.requeue, jobs.WithMaxRetries(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Track(ctx, jobs.Job{ID: "j1", Payload: []byte("p"), Attempt: 3}, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		r.Scan(ctx) // attempt 4 > MaxRetries 1: to the dead set
		if c, _ := reg.Counts(ctx); c.Dead != 1 || q.len() != 0 {
			t.Fatalf("counts %+v, requeued %d: want the job dead", c, q.len())
		}
		j, err := jobs.Revive(ctx, reg, "j1", "leasehold-cli")
		if err != nil {
			t.Fatal(err)
		}
		if j.Attempt != 0 || j.Owner != "leasehold-cli" || string(j.Payload) != "p" || len(j.History) != 0 {
			t.Fatalf("revived %+v, want attempt 0 and no history, as a new job", j)
		}
		if c, _ := reg.Counts(ctx); c.Dead != 0 || c.Tracked != 1 {
			t.Fatalf("counts after Revive %+v, want 1 tracked and none dead", c)
		}
		time.Sleep(time.Millisecond) // the revived deadline passes
		if n := r.Scan(ctx); n != 1 || q.len() != 1 {
			t.Fatalf("scan recovered %d, requeued %d; want 1", n, q.len())
		}
		if got := q.jobs[0]; got.ID != "j1" || got.Attempt != 1 || string(got.Payload) != "p" || len(got.History) != 1 {
			t.Fatalf("requeued %+v, want j1 at attempt 1 with the one reclaim since the revival", got)
		}
		if c, _ := reg.Counts(ctx); c != (jobs.Counts{}) {
			t.Fatalf("counts after recovery %+v, want none", c)
		}
		if _, err := jobs.Revive(ctx, reg, "j1", "x"); !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("Revive of a job not dead: %v, want ErrNotFound", err)
		}
	})
}

func ExampleRevive() {
	ctx := context.Background()
	reg := memjobs.New()
	_, _ = reg.Track(ctx, jobs.Job{ID: "poison"}, time.Minute)
	inflight, _ := reg.InFlight(ctx, 1)
	_ = reg.Bury(ctx, inflight[0].Ref(), "its workers keep crashing")
	// An operator's tool has no Requeue: it puts the job back in flight,
	// expired at once, for the application's recovery scan to requeue.
	j, err := jobs.Revive(ctx, reg, "poison", "operator")
	fmt.Println(j.ID, j.Owner, j.Attempt, err)
	c, _ := reg.Counts(ctx)
	fmt.Println(c.Tracked, c.Dead)
	// Output:
	// poison operator 0 <nil>
	// 1 0
}

// Revive records by as the job's owner: it must be an identity, refused
// before the dead job is touched.
func TestReviveChecksBy(t *testing.T) {
	ctx := t.Context()
	reg := memjobs.New()
	j, err := reg.Track(ctx, jobs.Job{ID: "d", Owner: "w"}, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Bury(ctx, j.Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{"", "cli\x1eforged", "cli\nforged"} {
		if _, err := jobs.Revive(ctx, reg, "d", by); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Revive by %q: %v, want ErrInvalidArgument", by, err)
		}
	}
	if c, err := reg.Counts(ctx); err != nil || c != (jobs.Counts{Dead: 1}) {
		t.Fatalf("after refused revivals: %+v, %v; want the job still dead only", c, err)
	}
}

// slowPurge holds Purge and PurgeBurial until released, as a request on
// a slow link: it lands then, however late, and its caller learns of its
// outcome only if its ctx has not ended meanwhile.
type slowPurge struct {
	*memjobs.Registry
	entered, release chan struct{}
}

func (r *slowPurge) Purge(ctx context.Context, id string) error {
	return r.slow(ctx, func(ctx context.Context) error { return r.Registry.Purge(ctx, id) })
}

func (r *slowPurge) PurgeBurial(ctx context.Context, ref jobs.Ref) error {
	return r.slow(ctx, func(ctx context.Context) error { return r.Registry.PurgeBurial(ctx, ref) })
}

func (r *slowPurge) slow(ctx context.Context, purge func(context.Context) error) error {
	close(r.entered)
	<-r.release
	err := purge(context.WithoutCancel(ctx))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// byIDOnly hides the BurialPurger of the registry it wraps.
type byIDOnly struct{ *slowPurge }

func (byIDOnly) PurgeBurial() {} // not a jobs.BurialPurger's

// A Revive whose purge lands more than the hold (a minute) late, after a
// scan reclaimed the revived job and buried it again (MaxRetries 0),
// leaves that new burial: a BurialPurger's purge deletes the burial the
// job was taken out of alone. Through a registry without it, the purge,
// by ID, deletes the new burial: the job is nowhere (the window the hold
// leaves, which the design's Purge by ID cannot close).
func TestRevivePurgeLandingPastTheHold(t *testing.T) {
	for _, exact := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			ctx := t.Context()
			mem, reg, q, r := deadWithSlowPurge(t)
			var target jobs.Registry = reg
			if !exact {
				target = byIDOnly{reg}
			}
			revived := make(chan error, 1)
			go func() {
				_, err := jobs.Revive(ctx, target, "j", "operator")
				revived <- err
			}()
			<-reg.entered                         // tracked, the purge on its way
			time.Sleep(time.Minute + time.Second) // the hold passes
			r.Scan(ctx)                           // the leader's scan buries the revived job again
			close(reg.release)                    // the purge lands
			if err := <-revived; err == nil {
				t.Errorf("Revive whose purge outlived its ctx returned nil")
			}
			c, _ := mem.Counts(ctx)
			switch lost := c.Tracked == 0 && c.Dead == 0 && q.len() == 0; {
			case exact && lost:
				t.Fatalf("job lost through a BurialPurger: counts %+v, requeued %d", c, q.len())
			case !exact && !lost:
				t.Fatalf("purge by ID: counts %+v, requeued %d; want the new burial deleted (the window this test shows the BurialPurger closes)", c, q.len())
			}
		})
	}
}

// deadWithSlowPurge buries job "j" (tracked as a crashed worker's, then
// reclaimed by a scan under MaxRetries 0) and returns the registry, a
// wrapper of it whose Purge waits for release, and a runner over the
// wrapper (MaxRetries 0) with its queue.
func deadWithSlowPurge(t *testing.T) (*memjobs.Registry, *slowPurge, *queue, *jobs.Runner) {
	t.Helper()
	mem := memjobs.New()
	reg := &slowPurge{Registry: mem, entered: make(chan struct{}), release: make(chan struct{})}
	q := &queue{}
	r := newRunner(t, reg, testkit.Must(memlock.New()), q, jobs.WithMaxRetries(0))
	if _, err := mem.Track(t.Context(), jobs.Job{ID: "j", Payload: []byte("p")}, time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	r.Scan(t.Context())
	if c, _ := mem.Counts(t.Context()); c != (jobs.Counts{Dead: 1}) {
		t.Fatalf("counts %+v, want the job dead", c)
	}
	return mem, reg, q, r
}

// A scan that runs while Revive's purge is on its way (MaxRetries 0)
// leaves the revived job alone, and the job ends dead again. Revive
// tracked it with a 1 ms lease before the purge: the scan reclaimed it and
// buried it again, and the purge, by ID, deleted that new burial. The job
// was nowhere: not in flight, not dead, not requeued.
func TestReviveWhileAScanRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem, reg, q, r := deadWithSlowPurge(t)
		revived := make(chan error, 1)
		go func() {
			_, err := jobs.Revive(ctx, reg, "j", "operator")
			revived <- err
		}()
		<-reg.entered                    // tracked, Purge on its way
		time.Sleep(2 * time.Millisecond) // a lease of 1 ms passes
		r.Scan(ctx)                      // the leader's scan
		close(reg.release)
		if err := <-revived; err != nil {
			t.Fatal(err)
		}
		c, _ := mem.Counts(ctx)
		if c.Tracked == 0 && c.Dead == 0 && q.len() == 0 {
			t.Fatalf("job lost: counts %+v, requeued %d", c, q.len())
		}
		// Revived, it expires at once: the next scan buries it again.
		time.Sleep(2 * time.Millisecond)
		r.Scan(ctx)
		if c, _ := mem.Counts(ctx); c != (jobs.Counts{Dead: 1}) || q.len() != 0 {
			t.Fatalf("counts %+v, requeued %d: want the revived job dead again", c, q.len())
		}
	})
}

// A RetryDead whose purge is slow, while the requeued job runs, crashes
// and is buried again (MaxRetries 0), leaves the job somewhere. RetryDead
// requeued it before the purge, by ID, which then deleted its new burial:
// the job was lost.
func TestRetryDeadWhileTheJobIsBuriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem, reg, q, r := deadWithSlowPurge(t)
		// The worker takes what is queued, and crashes; the ttl passes; the
		// leader's scan buries it again.
		taken := 0
		runAndCrash := func() {
			q.mu.Lock()
			queued := q.jobs[taken:]
			taken = len(q.jobs)
			q.mu.Unlock()
			for _, j := range queued {
				crashWith(t, r, j)
			}
			time.Sleep(jobs.DefaultTTL + time.Second)
			r.Scan(ctx)
		}
		retried := make(chan error, 1)
		go func() { retried <- r.RetryDead(ctx, "j") }()
		<-reg.entered // Purge on its way
		runAndCrash()
		close(reg.release)
		if err := <-retried; err != nil {
			t.Fatal(err)
		}
		runAndCrash()
		c, _ := mem.Counts(ctx)
		if c.Tracked == 0 && c.Dead == 0 && q.len() == taken {
			t.Fatalf("job lost: counts %+v, requeued %d, all taken", c, q.len())
		}
	})
}

// A Revive whose purge lands past the hold, after the scan reclaimed the
// revived job (MaxRetries 3) and requeued it, leaves that life's retry
// record: the worker that takes the job from the queue tracks it with its
// count. The purge of the burial deleted the record with the dead job: the
// job started again from attempt 0, its history gone.
func TestRevivePurgeLandingPastTheHoldKeepsTheCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := memjobs.New()
		reg := &slowPurge{Registry: mem, entered: make(chan struct{}), release: make(chan struct{})}
		q := &queue{}
		r := newRunner(t, reg, testkit.Must(memlock.New()), q, jobs.WithMaxRetries(3))
		j, err := mem.Track(ctx, jobs.Job{ID: "j", Payload: []byte("p")}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Bury(ctx, j.Ref(), "test"); err != nil {
			t.Fatal(err)
		}
		revived := make(chan error, 1)
		go func() {
			_, err := jobs.Revive(ctx, reg, "j", "operator")
			revived <- err
		}()
		<-reg.entered
		time.Sleep(time.Minute + time.Second) // the hold passes
		r.Scan(ctx)                           // reclaimed (attempt 1), requeued, removed: a retry record
		if q.len() != 1 {
			t.Fatalf("requeued %d jobs, want 1", q.len())
		}
		close(reg.release) // the purge of the burial lands
		<-revived
		got, err := mem.Track(ctx, jobs.Job{ID: "j", Payload: []byte("p")}, time.Minute)
		if err != nil || got.Attempt != 1 || len(got.History) != 1 {
			t.Fatalf("tracked again from the queue: attempt %d, history %d, %v; want 1, 1", got.Attempt, len(got.History), err)
		}
	})
}
