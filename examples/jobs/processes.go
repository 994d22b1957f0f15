package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// runProcesses is the demo with real processes: the queue (a Redis list),
// the registry and the lock live on Redis; three worker processes (this
// program run again with -worker) take jobs; the second is SIGKILLed in
// the middle of a job. The survivors recover its jobs.
func runProcesses(ctx context.Context, out io.Writer, addr string, total int) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ns := fmt.Sprintf("example-jobs-%d", time.Now().UnixNano())
	q := redisQueue{c, ns + ":queue"}
	for i := range total {
		if err := q.push(ctx, jobs.Job{ID: fmt.Sprintf("job-%02d", i)}); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "+%5.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	started, completed := map[string]int{}, map[string]int{}
	allDone := make(chan struct{})
	var procs []*exec.Cmd
	var wg sync.WaitGroup
	for w := range 3 {
		cmd := exec.CommandContext(ctx, exe, "-redis", addr, "-ns", ns, "-worker", strconv.Itoa(w))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
		say("worker-%d started (pid %d)", w, cmd.Process.Pid)
		wg.Go(func() {
			taken := 0
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				switch {
				case len(f) == 2 && f[0] == "START":
					mu.Lock()
					started[f[1]]++
					mu.Unlock()
					if taken++; w == 1 && taken == 1 {
						_ = cmd.Process.Signal(syscall.SIGKILL)
						say("worker-%d SIGKILLed in the middle of %s", w, f[1])
					}
				case len(f) == 2 && f[0] == done:
					mu.Lock()
					completed[f[1]]++
					n := len(completed)
					mu.Unlock()
					if n == total {
						select {
						case <-allDone:
						default:
							close(allDone)
						}
					}
				case len(f) >= 2 && f[0] == "RECOVERED":
					say("worker-%d recovered %s", w, strings.Join(f[1:], " "))
				case len(f) == 2 && f[0] == stale:
					say("worker-%d: its completion of %s was rejected (recovered meanwhile)", w, f[1])
				case len(f) == 2 && f[0] == putBack:
					say("worker-%d abandoned %s and put it back", w, f[1])
				}
			}
		})
	}
	select {
	case <-allDone:
	case <-ctx.Done():
	}
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	wg.Wait()
	for _, p := range procs {
		_ = p.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	return summary(out, total, started, completed)
}

// workerMain is one worker process: it takes jobs from the Redis list,
// tracks them, works (the second worker slowly, so that it dies mid-job),
// and reports on stdout: START, then DONE, STALE, ABANDONED or PUTBACK
// (settle's outcome), and RECOVERED.
func workerMain(addr, ns string, w int) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	quiet := lock.Common{Logger: slog.New(slog.DiscardHandler)}
	reg, err := redisjobs.New(c, ns)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("worker-%d/%d", w, os.Getpid())
	l, err := redislock.New(c, redislock.WithCommon(quiet), redislock.WithCommon(lock.Common{Owner: name}))
	if err != nil {
		return err
	}
	defer l.Close()
	q := redisQueue{c, ns + ":queue"}
	var mu sync.Mutex
	say := func(format string, args ...any) { mu.Lock(); fmt.Printf(format+"\n", args...); mu.Unlock() }
	runner, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, _ time.Duration) error {
		say("RECOVERED %s attempt %d from %s", j.ID, j.Attempt, j.History[len(j.History)-1].From)
		return q.push(ctx, j)
	}, jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(250*time.Millisecond), jobs.WithScanInterval(250*time.Millisecond),
		jobs.WithRetryBackoff(0, 0), jobs.WithElection(ns), jobs.WithCommon(quiet))
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	go func() { _ = runner.Run(ctx) }()
	work := 30 * time.Millisecond
	if w == 1 {
		work = 300 * time.Millisecond
	}
	for ctx.Err() == nil {
		j, ok := q.pop(ctx)
		if !ok {
			continue
		}
		jctx, finish, err := runner.Track(ctx, j)
		if err != nil {
			continue
		}
		say("START %s", j.ID)
		say("%s %s", settle(ctx, q, j, jctx, finish, work), j.ID)
	}
	return nil
}

func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
