// Command jobs runs a small job queue with crash recovery: three workers
// take jobs from a queue, track them with jobs.Runner, and one of them
// crashes mid-job. The survivors recover its jobs; in the end every job has
// completed, and the program says how many ran twice.
//
//	go run ./examples/jobs                         # in memory: workers are goroutines, one stops as if killed
//	go run ./examples/jobs -redis 127.0.0.1:6379   # three worker processes on Redis, one SIGKILLed
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func main() {
	addr := flag.String("redis", "", "Redis address: three worker processes share a queue, a registry and a lock there (default: in memory, three workers as goroutines)")
	n := flag.Int("jobs", 30, "jobs to run")
	worker := flag.Int("worker", -1, "internal: run as worker process N")
	ns := flag.String("ns", "", "internal: the worker's namespace")
	flag.Parse()
	var err error
	switch {
	case *worker >= 0:
		err = workerMain(*addr, *ns, *worker)
	case *addr != "":
		err = runProcesses(context.Background(), os.Stdout, *addr, *n)
	default:
		err = run(context.Background(), os.Stdout, *n)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobs:", err)
		os.Exit(1)
	}
}

// queue hands out jobs: chanQueue in memory, redisQueue (a list) in the
// process demo.
type queue interface {
	push(ctx context.Context, j jobs.Job) error
	pop(ctx context.Context) (jobs.Job, bool)
}

// Outcomes of settle.
const (
	done      = "DONE"      // worked through; the completion was accepted
	stale     = "STALE"     // worked through, but the completion was rejected: recovered meanwhile, it runs again elsewhere
	abandoned = "ABANDONED" // the job's context ended first: reclaimed elsewhere, or its lease ran out here
	putBack   = "PUTBACK"   // abandoned while still this worker's: back on the queue, since nobody will recover it
)

// settle works on a tracked job for d, unless its context ends first, and
// finishes it. Only a done job counts as completed.
func settle(ctx context.Context, q queue, j jobs.Job, jctx context.Context, finish func(error) error, d time.Duration) string {
	select {
	case <-time.After(d): // the work
	case <-jctx.Done():
	}
	if cause := context.Cause(jctx); cause != nil {
		if finish(cause) == nil { // still ours: nobody will recover it
			if err := q.push(context.WithoutCancel(ctx), j); err == nil {
				return putBack
			}
		}
		return abandoned
	}
	if finish(nil) != nil {
		return stale
	}
	return done
}

// chanQueue is the in-memory queue.
type chanQueue chan jobs.Job

func (q chanQueue) push(_ context.Context, j jobs.Job) error { q <- j; return nil }
func (q chanQueue) pop(ctx context.Context) (jobs.Job, bool) {
	select {
	case j := <-q:
		return j, true
	case <-time.After(100 * time.Millisecond):
		return jobs.Job{}, false
	}
}

type redisQueue struct {
	c   *redis.Client
	key string
}

func (q redisQueue) push(ctx context.Context, j jobs.Job) error {
	return q.c.LPush(ctx, q.key, fmt.Sprintf("%s|%d", j.ID, j.Attempt)).Err()
}
func (q redisQueue) pop(ctx context.Context) (jobs.Job, bool) {
	v, err := q.c.RPop(ctx, q.key).Result()
	if err != nil { // empty (redis.Nil) or unreachable: look again soon
		time.Sleep(20 * time.Millisecond)
		return jobs.Job{}, false
	}
	id, attempt, _ := strings.Cut(v, "|")
	j := jobs.Job{ID: id}
	j.Attempt, _ = strconv.Atoi(attempt)
	return j, true
}

// run is the in-memory demo: the workers are goroutines, and the one that
// "crashes" stops heartbeating and never finishes its job, as a SIGKILLed
// process would.
func run(ctx context.Context, out io.Writer, total int) error {
	quiet := lock.Common{Logger: slog.New(slog.DiscardHandler)}
	reg, q := memjobs.New(), make(chanQueue, total*2)
	table, err := memlock.New()
	if err != nil {
		return err
	}
	newLk := func(owner string) (lock.Lock, error) {
		return table.Share(memlock.WithCommon(quiet), memlock.WithCommon(lock.Common{Owner: owner}))
	}
	var (
		mu        sync.Mutex
		started   = map[string]int{}
		completed = map[string]int{}
		start     = time.Now()
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "+%5.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	for i := range total {
		if err := q.push(ctx, jobs.Job{ID: fmt.Sprintf("job-%02d", i)}); err != nil {
			return err
		}
	}
	requeue := func(ctx context.Context, j jobs.Job, _ time.Duration) error {
		say("recovered %s (attempt %d, was held by %s): requeued", j.ID, j.Attempt, j.History[len(j.History)-1].From)
		return q.push(ctx, j)
	}
	fast := []jobs.Option{jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(250 * time.Millisecond), jobs.WithScanInterval(250 * time.Millisecond), jobs.WithRetryBackoff(0, 0), jobs.WithCommon(quiet)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 3 {
		name := fmt.Sprintf("worker-%d", w)
		l, err := newLk(name)
		if err != nil {
			return err
		}
		runner, err := jobs.NewRunner(reg, l, requeue, fast...)
		if err != nil {
			return err
		}
		wctx, crash := context.WithCancel(ctx)
		wg.Go(func() { _ = runner.Run(wctx) })
		wg.Go(func() {
			for finished := 0; wctx.Err() == nil; {
				j, ok := q.pop(wctx)
				if !ok {
					continue
				}
				jctx, finish, err := runner.Track(wctx, j)
				if err != nil {
					continue
				}
				mu.Lock()
				started[j.ID]++
				mu.Unlock()
				if w == 2 && finished == 3 {
					say("%s crashes in the middle of %s (and of whatever it holds)", name, j.ID)
					crash() // no more heartbeats, no finish: as if SIGKILLed
					return
				}
				switch settle(wctx, q, j, jctx, finish, 30*time.Millisecond) {
				case stale:
					say("%s: its completion of %s was rejected (recovered meanwhile)", name, j.ID)
					continue
				case abandoned:
					continue
				case putBack:
					say("%s abandoned %s and put it back", name, j.ID)
					continue
				}
				mu.Lock()
				completed[j.ID]++
				n := len(completed)
				mu.Unlock()
				finished++
				if n == total {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	return summary(out, total, started, completed)
}

// summary prints how many jobs completed and how many ran more than once
// (their runs beyond the first): a crashed worker's job runs again
// elsewhere.
func summary(out io.Writer, total int, started, completed map[string]int) error {
	dups := 0
	for _, n := range started {
		dups += n - 1
	}
	fmt.Fprintf(out, "\n%d of %d jobs completed; %d ran twice; none lost\n", len(completed), total, dups)
	if len(completed) != total {
		return fmt.Errorf("%d jobs never completed", total-len(completed))
	}
	return nil
}
