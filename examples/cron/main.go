// Command cron is the first program of a team that runs cron on three
// hosts: three schedulers share one backend and run the same timers, in
// both of the models that timers offers.
//
//   - "report" runs once per tick cluster-wide (the default): whichever
//     host claims the tick runs it, the others see it taken.
//   - "warm-cache" runs on up to N hosts per tick (WithRunsPerTick(N),
//     -runs-per-tick), each on a slot of its own, as timer libraries that
//     cap their runs with lock slots do: never more than N runs of a tick,
//     never more than N at once.
//   - "slow-export" runs once per tick, for longer than its interval, with
//     WithMaxConcurrency(2): never more than two runs at once anywhere; a
//     tick that finds both slots busy is skipped, not queued.
//
// Every line says which host ran what:
//
//	go run ./examples/cron                                            # in memory
//	go run ./examples/cron -backend redis://127.0.0.1:6379 -runs-per-tick 3
//	go run ./examples/cron -backend redis://127.0.0.1:6379 -hosts 1   # one host per process: start three
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

// config is what the flags set.
type config struct {
	url         string // the backend every host shares
	hosts       int    // schedulers in this process
	runsPerTick int    // warm-cache's WithRunsPerTick
	prefix      string // of the timer names ("" in the program; tests make theirs unique)
}

func main() {
	var c config
	flag.StringVar(&c.url, "backend", "mem://cron", "backend URL (mem://NAME, redis://host:port, postgres://..., etcd://host:port)")
	flag.IntVar(&c.hosts, "hosts", 3, "schedulers (hosts) in this process; with -hosts 1, start one process per host")
	flag.IntVar(&c.runsPerTick, "runs-per-tick", 2, "how many hosts run each warm-cache tick (WithRunsPerTick)")
	runFor := flag.Duration("for", 6*time.Second, "how long to run (0: until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "cron:", err)
		os.Exit(1)
	}
}

// run starts c.hosts schedulers on c.url until ctx ends, then prints each
// host's status. A run prints "+<seconds>s  <host> <timer> tick <hh:mm:ss.mmm> <what>".
func run(ctx context.Context, out io.Writer, c config) error {
	var mu sync.Mutex
	start := time.Now()
	say := func(host, timer string, tick time.Time, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%-8s %-7s %-11s tick %s %s\n", fmt.Sprintf("+%.3fs", time.Since(start).Seconds()), host, timer, tick.Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	quiet := slog.New(slog.DiscardHandler)
	var wg sync.WaitGroup
	var schedulers []*timers.Scheduler
	var names []string
	for h := range c.hosts {
		host := fmt.Sprintf("host-%d", h)
		if c.hosts == 1 {
			host = fmt.Sprintf("pid-%d", os.Getpid())
		}
		l, closeFn, err := backend.Open(ctx, c.url, backend.WithCommon(lock.Common{Owner: host, Logger: quiet}))
		if err != nil {
			return err
		}
		defer func() { _ = closeFn() }()
		s, err := timers.New(l, timers.WithCommon(lock.Common{Logger: quiet}))
		if err != nil {
			return err
		}
		// work is a timer's function: it prints its start and its end and
		// takes d, or less if its context ends first.
		work := func(timer string, d time.Duration) func(context.Context) error {
			return func(ctx context.Context) error {
				tick, _ := timers.TickFrom(ctx)
				say(host, timer, tick.At, "starts on slot %d", tick.Slot)
				select {
				case <-time.After(d):
					say(host, timer, tick.At, "done")
				case <-ctx.Done():
					say(host, timer, tick.At, "stopped: %v", context.Cause(ctx))
				}
				return nil
			}
		}
		for _, t := range []*timers.Timer{
			timers.Every(c.prefix+"report", time.Second, work("report", 50*time.Millisecond)),
			timers.Every(c.prefix+"warm-cache", time.Second, work("warm-cache", 200*time.Millisecond), timers.WithRunsPerTick(c.runsPerTick)),
			timers.Every(c.prefix+"slow-export", time.Second, work("slow-export", 2500*time.Millisecond),
				timers.WithMaxConcurrency(2), timers.WithMaxRunTime(5*time.Second)),
			timers.Cron(c.prefix+"nightly-cleanup", "0 3 * * *", func(context.Context) error { return nil }),
		} {
			if err := s.Add(t); err != nil {
				return err
			}
		}
		schedulers, names = append(schedulers, s), append(names, host)
		wg.Go(func() { _ = s.Run(ctx) })
	}
	wg.Wait()
	fmt.Fprintln(out, "\nstatus per host:")
	for h, s := range schedulers {
		for _, st := range s.Status() {
			fmt.Fprintf(out, "  %-7s %-22s runs %2d  skipped %2d  taken elsewhere %2d  next %s\n",
				names[h], st.Name, st.Runs, st.Skips, st.Elsewhere, st.Next.Format("15:04:05"))
		}
	}
	return nil
}
