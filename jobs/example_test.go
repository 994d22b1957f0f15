package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func ExampleNewRunner() {
	reg := memjobs.New()                                                      // or redisjobs / pgjobs: durable
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "worker-1"})) // elects the recoverer; its owner names this runner
	if err != nil {
		log.Fatal(err)
	}
	requeue := func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		return nil // put j back on your queue, to run after delay
	}
	// Recover a crashed worker's jobs in about 3 s rather than the
	// defaults' 20 s, and bury a job after 3 recoveries.
	r, err := jobs.NewRunner(reg, l, requeue,
		jobs.WithTTL(2*time.Second), jobs.WithHeartbeatInterval(500*time.Millisecond), jobs.WithScanInterval(time.Second),
		jobs.WithMaxRetries(3), jobs.WithElection("billing-jobs"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Owner())
	// The configuration is checked here: a heartbeat must come at least
	// three times per lease.
	_, err = jobs.NewRunner(reg, l, requeue, jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(time.Second))
	fmt.Println(errors.Is(err, lock.ErrInvalidArgument))
	// Output:
	// worker-1
	// true
}

func ExampleRunner_Run() {
	reg := memjobs.New()
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "worker-1"}))
	if err != nil {
		log.Fatal(err)
	}
	requeued := make(chan jobs.Job, 1)
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		requeued <- j
		return nil
	}, jobs.WithTTL(3*time.Second), jobs.WithHeartbeatInterval(500*time.Millisecond), jobs.WithScanInterval(50*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		_ = r.Run(ctx) // recovers crashed workers' jobs while it leads
		close(stopped)
	}()
	defer func() { stop(); <-stopped }()
	// A job of this process: the heartbeats Track starts keep it.
	jctx, done, err := r.Track(ctx, jobs.Job{ID: "mine"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A job of a worker that crashed: its lease runs out, and Run's
	// recovery scan requeues it.
	_, _ = reg.Track(ctx, jobs.Job{ID: "orphan", Owner: "worker-2"}, time.Millisecond)
	j := <-requeued
	fmt.Println("requeued", j.ID, "of", j.History[0].From, "attempt", j.Attempt)
	fmt.Println("mine still running:", jctx.Err() == nil)
	fmt.Println(done(nil))
	// Output:
	// requeued orphan of worker-2 attempt 1
	// mine still running: true
	// <nil>
}

// The full shape, in every worker process: one Runner, whose Run recovers
// the jobs of crashed workers while this process leads the recovery
// election (one process at a time), and Track around each job taken from
// the queue, which heartbeats it until done, with or without Run.
func ExampleRunner_Track() {
	reg := memjobs.New()        // or redisjobs / pgjobs: shared by every process
	table, err := memlock.New() // or the backend's lock: elects the recoverer
	if err != nil {
		log.Fatal(err)
	}
	queue := make(chan jobs.Job, 10) // your queue
	requeue := func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		queue <- j // a real queue delivers it after delay
		return nil
	}
	r, err := jobs.NewRunner(reg, table, requeue, jobs.WithTTL(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- r.Run(ctx) }() // leader-gated recovery
	defer func() { stop(); <-stopped }()

	queue <- jobs.Job{ID: "invoice-42", Payload: []byte(`{"customer": 7}`)}
	// A worker that crashed holding report-9: its lease runs out, and the
	// leader's scan requeues it.
	if _, err := reg.Track(ctx, jobs.Job{ID: "report-9", Owner: "worker-2"}, time.Millisecond); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		j := <-queue
		jctx, done, err := r.Track(ctx, j)
		if err != nil {
			log.Fatal(err)
		}
		// Do the work under jctx: it is cancelled if the job is lost
		// (reclaimed elsewhere, or not renewed in time). This work takes
		// longer than the ttl: the heartbeats keep the job.
		select {
		case <-jctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
		fmt.Println(j.ID, "attempt", j.Attempt, "done:", done(context.Cause(jctx)))
	}
	// Output:
	// invoice-42 attempt 0 done: <nil>
	// report-9 attempt 1 done: <nil>
}

func ExampleRunner_Scan() {
	reg := memjobs.New()
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "recoverer"}))
	if err != nil {
		log.Fatal(err)
	}
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		fmt.Printf("requeue %s, attempt %d, held by %s\n", j.ID, j.Attempt, j.History[0].From)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// A worker that crashed: its job's lease runs out without a heartbeat.
	_, _ = reg.Track(context.Background(), jobs.Job{ID: "report-9", Owner: "worker-2"}, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	fmt.Println("recovered:", r.Scan(context.Background())) // Run does this every scan interval while it leads
	// Output:
	// requeue report-9, attempt 1, held by worker-2
	// recovered: 1
}

func ExampleWithRecoveryConcurrency() {
	reg := memjobs.New()
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "recoverer"}))
	if err != nil {
		log.Fatal(err)
	}
	// Up to 8 recoveries at once: Requeue is then called from several
	// goroutines, so what it shares is guarded.
	var (
		mu       sync.Mutex
		requeued []string
	)
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		requeued = append(requeued, j.ID)
		return nil
	}, jobs.WithRecoveryConcurrency(8))
	if err != nil {
		log.Fatal(err)
	}
	// A crashed worker's 100 jobs: their leases run out without a heartbeat.
	for i := range 100 {
		_, _ = reg.Track(context.Background(), jobs.Job{ID: fmt.Sprintf("job-%d", i), Owner: "worker-2"}, time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond)
	fmt.Println("recovered:", r.Scan(context.Background()), "requeued:", len(requeued))
	// Output:
	// recovered: 100 requeued: 100
}

func ExampleRunner_RetryDead() {
	reg := memjobs.New()
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		fmt.Println("requeued", j.ID, "attempt", j.Attempt)
		return nil
	}, jobs.WithMaxRetries(0))
	if err != nil {
		log.Fatal(err)
	}
	_, _ = reg.Track(context.Background(), jobs.Job{ID: "poison"}, time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	r.Scan(context.Background()) // MaxRetries 0: straight to the dead set
	dead, _ := reg.Dead(context.Background(), 10)
	fmt.Println(len(dead), dead[0].ID)
	fmt.Println(r.RetryDead(context.Background(), "poison"))
	// Output:
	// 1 poison
	// requeued poison attempt 0
	// <nil>
}

func ExampleInspector() {
	ctx := context.Background()
	var reg jobs.Registry = memjobs.New() // or redisjobs / pgjobs: each is an Inspector too
	_, _ = reg.Track(ctx, jobs.Job{ID: "invoice-42", Payload: []byte(`{"customer": 7}`), Owner: "worker-1"}, time.Minute)
	poison, _ := reg.Track(ctx, jobs.Job{ID: "report-9", Payload: []byte("…"), Owner: "worker-2", Attempt: 3}, time.Minute)
	_ = reg.Bury(ctx, poison.Ref(), "recovered 3 times (MaxRetries 2)")
	// The operator's view is optional: ask the registry for it.
	view, ok := reg.(jobs.Inspector)
	if !ok {
		fmt.Println("this registry cannot list its jobs")
		return
	}
	c, _ := view.Counts(ctx)
	fmt.Printf("%d in flight (%d expired), %d dead\n", c.Tracked, c.Expired, c.Dead)
	in, _ := view.InFlight(ctx, 10)
	for _, j := range in {
		fmt.Println("in flight:", j.ID, "owned by", j.Owner, "payload listed:", j.Payload != nil)
	}
	dead, _ := view.Dead(ctx, 10)
	for _, d := range dead {
		fmt.Println("dead:", d.ID, "attempt", d.Attempt, "-", d.Reason)
	}
	// One dead job whole, payload included, is the protocol's DeadJob.
	d, _ := reg.DeadJob(ctx, "report-9")
	fmt.Println(string(d.Payload))
	// Output:
	// 1 in flight (0 expired), 1 dead
	// in flight: invoice-42 owned by worker-1 payload listed: false
	// dead: report-9 attempt 3 - recovered 3 times (MaxRetries 2)
	// …
}

// Alerting on poison jobs: a job recovered MaxRetries times is buried in
// the dead set instead of requeued, and OnDead tells you.
func ExampleOnDead() {
	reg := memjobs.New()
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	dead := make(chan jobs.DeadJob, 1)
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		return nil
	}, jobs.WithMaxRetries(2), jobs.OnDead(func(ctx context.Context, d jobs.DeadJob) {
		dead <- d // page someone, with d.ID and d.Reason
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	// A job whose workers crashed twice already (attempt 2): its lease
	// runs out once more.
	_, _ = reg.Track(ctx, jobs.Job{ID: "resize-7731", Owner: "worker-3", Attempt: 2}, time.Millisecond)
	for {
		r.Scan(ctx) // Run scans every scan interval while it leads
		select {
		case d := <-dead:
			fmt.Printf("dead: %s at attempt %d (%s)\n", d.ID, d.Attempt, d.Reason)
			return
		case <-time.After(time.Millisecond): // the lease has not run out yet
		}
	}
	// Output: dead: resize-7731 at attempt 3 (recovered 2 times (MaxRetries 2): its workers keep crashing)
}

// Tracing a recovery step by step.
func ExampleOnStep() {
	reg := memjobs.New()
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		return nil // back on the queue
	}, jobs.OnStep(func(s jobs.Step, j jobs.Job) { fmt.Println(s, j.ID, "attempt", j.Attempt) }))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, _ = reg.Track(ctx, jobs.Job{ID: "email-12", Owner: "worker-2"}, time.Millisecond)
	for r.Scan(ctx) == 0 {
		time.Sleep(time.Millisecond)
	}
	// Output:
	// reclaimed email-12 attempt 1
	// requeued email-12 attempt 1
	// removed email-12 attempt 1
}

// The delay Requeue receives grows with each recovery of the same job:
// by default full jitter under base·2^(attempt−1), capped.
func ExampleWithRetryBackoff() {
	reg := memjobs.New()
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		// e.g. queue.PublishDelayed(ctx, j.Payload, delay)
		fmt.Println("requeue", j.ID, "attempt", j.Attempt, "within a second:", delay <= time.Second)
		return nil
	}, jobs.WithRetryBackoff(time.Second, 5*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, _ = reg.Track(ctx, jobs.Job{ID: "thumbnail-9", Owner: "worker-4"}, time.Millisecond)
	for r.Scan(ctx) == 0 {
		time.Sleep(time.Millisecond)
	}
	// Output: requeue thumbnail-9 attempt 1 within a second: true
}

// The exponential schedule with a bounded jitter: WithRetryJitter(0.2)
// keeps every delay within 20 % below base·2^(attempt−1) (capped), where
// the default full jitter may retry almost at once; 0 is the schedule
// itself.
func ExampleWithRetryJitter() {
	reg := memjobs.New()
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		fmt.Println("requeue", j.ID, "attempt", j.Attempt, "after", delay)
		return nil
	}, jobs.WithRetryBackoff(time.Second, time.Minute), jobs.WithRetryJitter(0))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// A job recovered twice already: its third recovery waits 1s·2².
	_, _ = reg.Track(ctx, jobs.Job{ID: "thumbnail-9", Owner: "worker-4", Attempt: 2}, time.Millisecond)
	for r.Scan(ctx) == 0 {
		time.Sleep(time.Millisecond)
	}
	// Output: requeue thumbnail-9 attempt 3 after 4s
}

// A handler reads the job as the registry recorded it: on a retry after a
// crash its Attempt is above 0, whatever the queue handed back.
func ExampleJobFrom() {
	ctx := context.Background()
	table, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	r, err := jobs.NewRunner(memjobs.New(), table, func(context.Context, jobs.Job, time.Duration) error { return nil })
	if err != nil {
		log.Fatal(err)
	}
	jctx, done, err := r.Track(ctx, jobs.Job{ID: "report-1", Payload: []byte("march")})
	if err != nil {
		log.Fatal(err)
	}
	if j, ok := jobs.JobFrom(jctx); ok && j.Attempt > 0 {
		fmt.Println("a retry: the report may be half written")
	} else {
		fmt.Println("first run of", j.ID)
	}
	if err := done(nil); err != nil {
		log.Fatal(err)
	}
	// Output: first run of report-1
}

// A caller of Registry.Heartbeat (Runner does this) treats the jobs of the
// chunks that failed as of unknown outcome: valid until their lease ends,
// neither renewed nor lost. Here the registry's second chunk failed.
func ExampleHeartbeatError() {
	heartbeat := func() ([]string, error) { // as reg.Heartbeat(ctx, refs, lease) may answer
		return []string{"job-3"}, &jobs.HeartbeatError{Unknown: []string{"job-7", "job-8"}, Err: errors.New("chunk 2: timeout")}
	}
	lost, err := heartbeat()
	var partial *jobs.HeartbeatError
	switch {
	case errors.As(err, &partial):
		fmt.Println("lost:", lost, "unknown:", partial.Unknown, "the others renewed")
	case err != nil:
		fmt.Println("every outcome unknown:", err)
	default:
		fmt.Println("lost:", lost, "the others renewed")
	}
	// Output: lost: [job-3] unknown: [job-7 job-8] the others renewed
}

// An operator tool that drops a dead job for good, unless it was revived
// and buried again since it was looked at: PurgeBurial names the burial.
func ExampleBurialPurger() {
	ctx := context.Background()
	reg := memjobs.New()
	j, _ := reg.Track(ctx, jobs.Job{ID: "poison"}, time.Minute)
	_ = reg.Bury(ctx, j.Ref(), "crashed its workers 3 times")
	seen, _ := reg.DeadJob(ctx, "poison")

	var bp jobs.BurialPurger = reg
	fmt.Println(bp.PurgeBurial(ctx, jobs.Ref{ID: "poison", Epoch: seen.Epoch + 1})) // another burial
	fmt.Println(bp.PurgeBurial(ctx, seen.Ref()))
	// Output:
	// jobs: no such job: dead job "poison"
	// <nil>
}

// A recovery tool of your own (a Runner's Scan does this for you): the
// expired jobs of a BatchRecoverer reclaimed in one call and, once
// requeued, removed in another, each answer its ref's.
func ExampleBatchRecoverer() {
	ctx := context.Background()
	reg := memjobs.New()
	var refs []jobs.Ref
	for _, id := range []string{"a", "b"} {
		j, _ := reg.Track(ctx, jobs.Job{ID: id, Owner: "crashed-worker"}, time.Millisecond)
		refs = append(refs, j.Ref())
	}
	for expired, _ := reg.Expired(ctx, 0); len(expired) < len(refs); expired, _ = reg.Expired(ctx, 0) {
		time.Sleep(time.Millisecond) // until their leases end
	}
	refs = append(refs, jobs.Ref{ID: "never-tracked", Epoch: 1})

	var br jobs.BatchRecoverer = reg
	var requeued []jobs.Ref
	for _, got := range br.ReclaimEach(ctx, refs, "recoverer", time.Minute) {
		if got.Err != nil {
			fmt.Println(errors.Is(got.Err, jobs.ErrStale))
			continue
		}
		fmt.Println(got.Job.ID, got.Job.Attempt, got.Job.Owner) // requeue it here
		requeued = append(requeued, got.Job.Ref())
	}
	fmt.Println(br.RemoveEach(ctx, requeued))
	// Output:
	// a 1 recoverer
	// b 1 recoverer
	// true
	// [<nil> <nil>]
}
