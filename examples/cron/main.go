// Command cron runs a few timers the way a fleet would: start three copies
// in three terminals on one backend and watch them share the ticks — each
// tick runs on exactly one host, and "slow-export" (WithMaxConcurrency(2),
// runs longer than its interval) never has more than two runs anywhere.
//
//	go run ./examples/cron                                   # in memory: three hosts in one process
//	go run ./examples/cron -backend redis://127.0.0.1:6379   # one host per process; start three
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/timers"
)

func main() {
	url := flag.String("backend", "mem://demo", "backend URL (mem://NAME, redis://host:port, ...)")
	hosts := flag.Int("hosts", 0, "hosts in this process (default: 3 on mem://, 1 otherwise)")
	runFor := flag.Duration("for", 6*time.Second, "how long to run (0: until interrupted)")
	flag.Parse()
	n := *hosts
	if n == 0 {
		n = 1
		if len(*url) >= 6 && (*url)[:6] == "mem://" {
			n = 3
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, os.Stdout, *url, n); err != nil {
		fmt.Fprintln(os.Stderr, "cron:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, url string, hosts int) error {
	var mu sync.Mutex
	start := time.Now()
	say := func(host, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "+%6.3fs  %-8s %s\n", time.Since(start).Seconds(), host, fmt.Sprintf(format, args...))
	}
	quiet := slog.New(slog.DiscardHandler)
	var wg sync.WaitGroup
	var schedulers []*timers.Scheduler
	for h := range hosts {
		name := fmt.Sprintf("host-%d", h)
		if hosts == 1 {
			name = fmt.Sprintf("pid-%d", os.Getpid())
		}
		l, closeFn, err := backend.Open(ctx, url, backend.WithCommon(lock.Common{Owner: name, Logger: quiet}))
		if err != nil {
			return err
		}
		defer closeFn()
		s, err := timers.New(l, timers.WithCommon(lock.Common{Logger: quiet}))
		if err != nil {
			return err
		}
		report := func(ctx context.Context) error {
			tick, _ := timers.TickFrom(ctx)
			say(name, "heartbeat report for tick %s", tick.At.Format("15:04:05.000"))
			return nil
		}
		export := func(ctx context.Context) error {
			tick, _ := timers.TickFrom(ctx)
			say(name, "slow export for tick %s starts (slot %d, takes 2.5 s)", tick.At.Format("15:04:05"), tick.Slot)
			select {
			case <-time.After(2500 * time.Millisecond):
				say(name, "slow export for tick %s done", tick.At.Format("15:04:05"))
			case <-ctx.Done():
				say(name, "slow export for tick %s stopped: %v", tick.At.Format("15:04:05"), context.Cause(ctx))
			}
			return nil
		}
		for _, t := range []*timers.Timer{
			timers.Every("heartbeat-report", time.Second, report),
			timers.Every("slow-export", time.Second, export, timers.WithMaxConcurrency(2), timers.WithMaxRunTime(5*time.Second)),
			timers.Cron("nightly-cleanup", "0 3 * * *", func(context.Context) error { return nil }),
		} {
			if err := s.Add(t); err != nil {
				return err
			}
		}
		schedulers = append(schedulers, s)
		wg.Go(func() { _ = s.Run(ctx) })
	}
	wg.Wait()
	fmt.Fprintln(out, "\nstatus per host:")
	for h, s := range schedulers {
		for _, st := range s.Status() {
			fmt.Fprintf(out, "  host-%d %-17s runs %2d  skipped %2d  ran elsewhere %2d  next %s\n",
				h, st.Name, st.Runs, st.Skips, st.Elsewhere, st.Next.Format("15:04:05"))
		}
	}
	return nil
}
