// Command jobs is leader-gated recovery of stuck jobs, as a newcomer's
// first program: three workers take jobs from a queue, two at a time, and
// Track each one with a jobs.Runner, whose Run recovers the jobs of crashed
// workers while that worker leads the recovery election. One job is poison:
// it kills its worker (SIGKILL) in the middle of its work, every time. A
// supervisor starts a new worker for each one that dies. The poison job is
// recovered and retried until the dead set (WithMaxRetries(2): three runs),
// the good jobs a dead worker held are recovered and run again elsewhere,
// and every good job completes.
//
//	go run ./examples/jobs                                       # in memory: the workers are goroutines
//	go run ./examples/jobs -backend redis://127.0.0.1:6379       # worker processes sharing Redis
//	go run ./examples/jobs -backend postgres://user:pw@host/db   # worker processes sharing PostgreSQL
//
// On Redis and PostgreSQL the queue, the registry (redisjobs, pgjobs) and
// the recovery election (that backend's lock) live on the server, and each
// worker is this program run again as a child process. In memory (mem://,
// the default) they live in this process and a killed worker is a goroutine
// that stops at once, its jobs neither heartbeated nor finished. etcd has
// no jobs registry: an etcd:// URL is refused.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock"
)

// The job mix and the recovery settings of the demo.
const (
	poison     = "poison-1"             // the job that kills its worker
	maxRetries = 2                      // recoveries before the dead set: the poison job runs 3 times
	workers    = 3                      // alive at once; the supervisor replaces each that dies
	perWorker  = 2                      // jobs a worker runs at once
	ttl        = time.Second            // a crashed worker's jobs are recovered about ttl + ttl/3 later
	work       = 50 * time.Millisecond  // a good job's work
	crashAfter = 100 * time.Millisecond // the poison job's work before it kills its worker
)

func main() {
	url := flag.String("backend", "mem://jobs-example", "backend URL: mem://NAME, redis://host:port or postgres://... (etcd has no jobs registry)")
	n := flag.Int("jobs", 12, "good jobs to run (and one poison job)")
	worker := flag.String("worker", "", "internal: run as the worker process of this name")
	ns := flag.String("ns", "", "internal: the worker's namespace")
	flag.Parse()
	var err error
	if *worker != "" {
		err = workerMain(*url, *ns, *worker)
	} else {
		_, err = run(context.Background(), os.Stdout, *url, *n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobs:", err)
		os.Exit(1)
	}
}

// env is what a worker works with: the shared registry, queue and lock,
// where it reports (one line per event), and how it dies.
type env struct {
	reg jobs.Registry
	q   queue
	l   lock.Lock
	out io.Writer
	ns  string
	die func() // kill this worker at once: SIGKILL, or, in memory, stop its goroutines
}

// worker runs one worker until ctx ends or it dies. It reports, one line
// each: START id attempt, DONE id, STALE id (its completion was rejected:
// recovered meanwhile), LOST id (its context ended: reclaimed elsewhere),
// CRASH id (the poison job kills it), and, as the recoverer, RECOVERED id
// attempt from, DEAD id attempt.
func worker(ctx context.Context, name string, e env) error {
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(e.out, format+"\n", args...)
	}
	quiet := lock.Common{Owner: name, Logger: slog.New(slog.DiscardHandler)}
	requeue := func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		say("RECOVERED %s %d %s", j.ID, j.Attempt, j.History[len(j.History)-1].From)
		return e.q.push(ctx, j, delay)
	}
	runner, err := jobs.NewRunner(e.reg, e.l, requeue,
		jobs.WithTTL(ttl), // the heartbeat (ttl/4) and scan (ttl/3) intervals follow it
		jobs.WithMaxRetries(maxRetries),
		jobs.WithRetryBackoff(100*time.Millisecond, time.Second), jobs.WithRetryJitter(0.2), // 100 ms, 200 ms, ... each at most 20 % less
		jobs.WithElection(e.ns),
		jobs.OnDead(func(_ context.Context, d jobs.DeadJob) { say("DEAD %s %d", d.ID, d.Attempt) }),
		jobs.WithCommon(quiet))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Leader-gated recovery: every worker campaigns; the leader scans.
	wg.Go(func() { _ = runner.Run(ctx) })
	// steps is held from pop to Track, from a job's finish to its report,
	// and by a crash, which cuts neither in two: this toy queue's pop is
	// destructive (a real one hands a job out again unless it is
	// acknowledged), so a job popped is never lost before it is tracked,
	// and a job finished is always reported DONE.
	var steps sync.Mutex
	slots := make(chan struct{}, perWorker)
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		steps.Lock()
		j, ok := e.q.pop(ctx)
		var (
			jctx   context.Context
			finish func(error) error
		)
		if ok {
			// The heartbeats Track starts keep the job until finish, with
			// or without Run.
			jctx, finish, err = runner.Track(ctx, j)
			ok = err == nil
			if err != nil && ctx.Err() == nil {
				_ = e.q.push(context.WithoutCancel(ctx), j, 0) // not tracked: back on the queue
			}
		}
		steps.Unlock()
		if !ok {
			<-slots
			continue
		}
		// The job as the registry recorded it: its Attempt counts its
		// recoveries, although the queue gave back only ID and payload.
		rec, _ := jobs.JobFrom(jctx)
		say("START %s %d", j.ID, rec.Attempt)
		wg.Go(func() {
			defer func() { <-slots }()
			if string(j.Payload) == "poison" {
				time.Sleep(crashAfter)
				steps.Lock() // never between a pop and its Track, nor a finish and its report
				say("CRASH %s", j.ID)
				e.die()
				steps.Unlock() // in memory: the worker's context has ended, it takes nothing more
				return
			}
			goodJob(ctx, jctx, j.ID, finish, &steps, say)
		})
	}
	return nil
}

// goodJob works on a good job for the time its work takes and reports how
// it ended, holding steps from its finish to its report. ctx is the
// worker's; jctx is the job's, from Track.
func goodJob(ctx, jctx context.Context, id string, finish func(error) error, steps sync.Locker, say func(string, ...any)) {
	select {
	case <-time.After(work):
	case <-jctx.Done():
	}
	steps.Lock()
	defer steps.Unlock()
	switch {
	case ctx.Err() != nil:
		return // killed, or stopping: the job is left to recovery
	case jctx.Err() != nil:
		// Lost (reclaimed elsewhere, or not renewed in time): the work is
		// given up unfinished, so no finish, which would remove the job
		// from the registry; it is recovered once its ttl passes, and
		// runs again.
		say("LOST %s", id)
	case finish(nil) != nil:
		say("STALE %s", id)
	default:
		say("DONE %s", id)
	}
}

// result is what the supervisor saw, by job ID.
type result struct {
	total     int
	started   map[string]int
	completed map[string]int
	recovered map[string]int
	dead      jobs.DeadJob // the poison job in the dead set, read back from the registry
	killed    int          // workers the poison job killed
}

// run is the supervisor: it fills the queue, keeps three workers alive,
// replacing each that dies, until every good job has completed and the
// poison job is dead, and tells the story.
func run(ctx context.Context, out io.Writer, url string, total int) (*result, error) {
	ns := fmt.Sprintf("example_jobs_%d", time.Now().UnixNano()) // this run's own queue, registry and election
	st, err := openStore(ctx, url, ns)
	if err != nil {
		return nil, err
	}
	defer st.close()
	for i := range total {
		if err := st.q.push(ctx, jobs.Job{ID: fmt.Sprintf("job-%02d", i), Payload: []byte("good")}, 0); err != nil {
			return nil, err
		}
		if i == 1 {
			if err := st.q.push(ctx, jobs.Job{ID: poison, Payload: []byte("poison")}, 0); err != nil {
				return nil, err
			}
		}
	}
	start := starter(func(ctx context.Context, name string) (io.Reader, func() error, func(), error) {
		return st.startWorker(ctx, url, ns, name)
	})
	res, err := supervise(ctx, out, total, start)
	if err != nil {
		return res, err
	}
	res.dead, err = st.reg.DeadJob(ctx, poison)
	if err != nil {
		return res, fmt.Errorf("%s is not in the dead set: %w", poison, err)
	}
	var path []string
	for _, h := range res.dead.History {
		path = append(path, h.From)
	}
	fmt.Fprintf(out, "\ndead set: %s, attempt %d, held by %s; %s\n", res.dead.ID, res.dead.Attempt, strings.Join(path, " → "), res.dead.Reason)
	dups, recoveries := 0, 0
	for id, n := range res.started {
		if id != poison {
			dups += n - 1
			recoveries += res.recovered[id]
		}
	}
	fmt.Fprintf(out, "%d of %d good jobs completed (%d ran again after %d recoveries), none lost; %s killed %d workers and is dead\n",
		len(res.completed), total, dups, recoveries, poison, res.killed)
	if len(res.completed) != total {
		return res, fmt.Errorf("%d good jobs never completed", total-len(res.completed))
	}
	if !st.mem {
		flag := "--table"
		if strings.HasPrefix(url, "redis") {
			flag = "--namespace"
		}
		fmt.Fprintf(out, "the dead set stays on the server: leasehold jobs --backend %s %s %s\n", backend.Redact(url), flag, ns)
	}
	return res, nil
}

// starter starts a worker called name, which stops when ctx ends: it
// returns where the worker reports, a wait for its end, and a function
// that stops it.
type starter func(ctx context.Context, name string) (events io.Reader, wait func() error, stop func(), err error)

// readLines yields the fields of each non-empty line r reports.
func readLines(r io.Reader) iter.Seq[[]string] {
	return func(yield func([]string) bool) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 && !yield(f) {
				return
			}
		}
	}
}

// event is one line a worker reported, or its end (line "").
type event struct {
	worker string
	f      []string
}

// supervise keeps workers alive and counts what they report, until every
// good job has completed and the poison job is dead (or a minute passes).
func supervise(ctx context.Context, out io.Writer, total int, start starter) (*result, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t0 := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "+%5.2fs  %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	res := &result{total: total, started: map[string]int{}, completed: map[string]int{}, recovered: map[string]int{}}
	events := make(chan event)
	stops := map[string]func(){}
	next := 0
	launch := func() error {
		name := fmt.Sprintf("worker-%d", next)
		next++
		r, wait, stop, err := start(ctx, name)
		if err != nil {
			return err
		}
		stops[name] = stop
		go func() {
			lines := readLines(r)
			for f := range lines {
				events <- event{name, f}
			}
			_ = wait()
			events <- event{worker: name}
		}()
		return nil
	}
	dead, stopping := false, false
	stopAll := func() {
		stopping = true
		for _, stop := range stops {
			stop()
		}
	}
	var err error
	for range workers {
		if err = launch(); err != nil {
			stopAll()
			break
		}
	}
	timeout := ctx.Done()
	for len(stops) > 0 {
		var ev event
		select {
		case ev = <-events:
		case <-timeout:
			timeout = nil
			if !stopping {
				err = fmt.Errorf("not finished after a minute: %d of %d good jobs completed, poison dead: %v", len(res.completed), total, dead)
				stopAll()
			}
			continue
		}
		f := ev.f
		switch {
		case f == nil: // the worker ended
			delete(stops, ev.worker)
			if !stopping {
				say("%s is gone; the supervisor starts a new worker", ev.worker)
				if err = launch(); err != nil {
					stopAll()
				}
			}
		case f[0] == "START" && len(f) == 3:
			res.started[f[1]]++
			if f[1] == poison || f[2] != "0" {
				say("%s starts %s (attempt %s)", ev.worker, f[1], f[2])
			}
		case f[0] == "DONE" && len(f) == 2:
			res.completed[f[1]]++
		case f[0] == "CRASH" && len(f) == 2:
			res.killed++
			say("%s is killed by %s, in the middle of its work", ev.worker, f[1])
		case f[0] == "RECOVERED" && len(f) == 4:
			res.recovered[f[1]]++
			say("%s (the recovery leader) requeues %s: attempt %s, was held by %s", ev.worker, f[1], f[2], f[3])
		case f[0] == "DEAD" && len(f) == 3:
			dead = true
			say("%s (the recovery leader) moves %s to the dead set at attempt %s", ev.worker, f[1], f[2])
		case (f[0] == "STALE" || f[0] == "LOST") && len(f) == 2:
			say("%s: %s %s", ev.worker, f[1], strings.ToLower(f[0]))
		}
		if !stopping && dead && len(res.completed) == total {
			stopAll()
		}
	}
	return res, err
}
