package timers_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

func ExampleScheduler_Add() {
	l, err := memlock.New() // any lock.Lock shared by the fleet
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l)
	if err != nil {
		log.Fatal(err)
	}
	report := func(ctx context.Context) error {
		tick, _ := timers.TickFrom(ctx)
		fmt.Println("report for", tick.At)
		return nil
	}
	fmt.Println(s.Add(timers.Every("reports", time.Minute, report, timers.WithMaxConcurrency(3), timers.WithSpreadStart())))
	fmt.Println(s.Add(timers.Cron("cleanup", "30 3 * * *", report, timers.WithMaxRunTime(time.Hour))))
	fmt.Println(s.Add(timers.Every("reports", time.Hour, report)))
	fmt.Println(s.Add(timers.Cron("bad", "61 * * * *", report)) != nil)
	// Output:
	// <nil>
	// <nil>
	// timers: invalid argument: a timer called "reports" is already registered
	// true
}

func ExampleScheduler_Run() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l)
	if err != nil {
		log.Fatal(err)
	}
	_ = s.Add(timers.Every("heartbeat", 100*time.Millisecond, func(ctx context.Context) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
	defer cancel()
	_ = s.Run(ctx) // returns once ctx has ended and the running functions are done
	st := s.Status()[0]
	fmt.Println(st.Name, st.Runs+st.Skips >= 2) // skips: ticks reached late on a busy machine
	// Output: heartbeat true
}

func ExampleCron() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	t := timers.Cron("nightly-export", "0 2 * * *", func(ctx context.Context) error { return nil },
		timers.WithLocation(berlin), timers.WithRetries(3, time.Minute), timers.WithMaxRunTime(30*time.Minute))
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Add(t))
	// Output: <nil>
}

func ExampleObserve() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	// An hourly timer whose clock starts just before a tick.
	s, err := timers.New(l, timers.WithClock(startsBefore(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_ = s.Add(timers.Every("reports", time.Hour, func(context.Context) error {
		defer cancel()
		// What any process that can reach the backend sees, mid-run:
		other, err := l.Share() // another process's view of the same backend
		if err != nil {
			return err
		}
		obs, _ := timers.Observe(context.Background(), other, "")
		for _, o := range obs {
			fmt.Println(o.Name, "tick", o.LastTick.UTC().Format(time.DateTime), "claimed by", o.ClaimedBy, "-", len(o.Running), "run in progress on", o.Running[0].Runner)
		}
		return nil
	}))
	_ = s.Run(ctx)
	// Output: reports tick 2030-01-01 09:00:00 claimed by host-a - 1 run in progress on host-a
}

func ExampleNew() {
	// The lock is shared by the fleet: redislock, pglock or etcdlock in
	// production (see package backend), memlock in one process.
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l,
		timers.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}), // the scheduler's logs: skips, failed runs, outages
		timers.WithShutdownTimeout(10*time.Second))                            // Run waits this long for running functions
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Add(timers.Every("reports", time.Minute, func(context.Context) error { return nil })))

	// An invalid option is reported by New.
	_, err = timers.New(l, timers.WithShutdownTimeout(0))
	fmt.Println(err)
	// Output:
	// <nil>
	// timers: invalid argument: shutdown timeout 0s must be positive and at most 8784h0m0s
}

func ExampleEvery() {
	// Every host computes the same ticks, aligned to the Unix epoch,
	// whatever moment it started; here its clock reads 12:00:07.
	now := time.Date(2030, 1, 1, 12, 0, 7, 0, time.UTC)
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l, timers.WithClock(func() time.Time { return now }))
	if err != nil {
		log.Fatal(err)
	}
	fn := func(context.Context) error { return nil }
	_ = s.Add(timers.Every("poll", 15*time.Second, fn))
	// WithSpreadStart: a phase derived from the name, the same on every host.
	_ = s.Add(timers.Every("poll-spread", 15*time.Second, fn, timers.WithSpreadStart()))
	// At most two runs at once anywhere; each may run for 10 minutes.
	_ = s.Add(timers.Every("rebuild", time.Hour, fn, timers.WithMaxConcurrency(2), timers.WithMaxRunTime(10*time.Minute)))
	fmt.Println(s.Add(timers.Every("broken", 0, fn)))
	for _, st := range s.Status() {
		fmt.Println(st.Name, "next tick at", st.Next.UTC().Format("15:04:05.000"))
	}
	// Output:
	// timers: invalid argument: timer "broken": interval 0s is below the minimum 1ms (a tick's claim is keyed by the millisecond)
	// poll next tick at 12:00:15.000
	// poll-spread next tick at 12:00:17.206
	// rebuild next tick at 13:00:00.000
}

func ExampleScheduler_Status() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l,
		timers.WithClock(startsBefore(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))),
		timers.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_ = s.Add(timers.Every("hourly-sync", time.Hour, func(context.Context) error {
		defer cancel() // one tick is enough for the example
		return errors.New("upstream down")
	}))
	_ = s.Run(ctx)
	for _, st := range s.Status() {
		fmt.Printf("%s: %d run, %d failed, %d skipped, %d run elsewhere\n", st.Name, st.Runs, st.Failures, st.Skips, st.Elsewhere)
		fmt.Printf("last run: tick %s on %s: %s (%v)\n", st.LastRun.Tick.UTC().Format(time.TimeOnly), st.LastRun.Runner, st.LastRun.Outcome, st.LastRun.Err)
		fmt.Println("next tick:", st.Next.UTC().Format(time.TimeOnly))
	}
	// Output:
	// hourly-sync: 1 run, 1 failed, 0 skipped, 0 run elsewhere
	// last run: tick 09:00:00 on host-a: error (upstream down)
	// next tick: 10:00:00
}

func ExampleTickFrom() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l, timers.WithClock(startsBefore(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_ = s.Add(timers.Every("invoices", time.Hour, func(ctx context.Context) error {
		defer cancel()
		tick, _ := timers.TickFrom(ctx)
		// The slot's fencing token: give it to what the run writes to, so
		// that a run that lost its slot cannot overwrite a newer one's work.
		token, _ := lock.TokenFrom(ctx)
		fmt.Println(tick.Timer, "tick", tick.At.UTC().Format(time.DateTime), "slot", tick.Slot, "local", tick.Local)
		fmt.Println("claim token", tick.Claim > 0, "slot token", token > 0)
		return nil
	}))
	_ = s.Run(ctx)
	_, ok := timers.TickFrom(context.Background()) // outside a run
	fmt.Println(ok)
	// Output:
	// invoices tick 2030-01-01 09:00:00 slot 0 local false
	// claim token true slot token true
	// false
}

// startsBefore is a clock that reads 10 ms before tick when it is first
// read and runs from there: the examples see one tick at once, however
// long the machine takes to get to Run.
func startsBefore(tick time.Time) func() time.Time {
	var once sync.Once
	var start time.Time
	return func() time.Time {
		once.Do(func() { start = time.Now() })
		return tick.Add(-10 * time.Millisecond).Add(time.Since(start))
	}
}

// A search-index rebuild every 10 minutes that can take up to 25: at most
// two rebuilds at once across the fleet, a third tick that finds both
// slots busy is skipped (and counted), never queued.
func ExampleWithMaxConcurrency() {
	l, err := memlock.New() // any lock.Lock shared by the fleet
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l) // one scheduler per host, over a shared backend
	if err != nil {
		log.Fatal(err)
	}
	rebuild := func(ctx context.Context) error {
		tick, _ := timers.TickFrom(ctx)
		_ = tick.Slot // 0 or 1: which of the two slots this run holds
		return nil    // rebuild; stop when ctx ends (WithMaxRunTime, lost slot, shutdown)
	}
	fmt.Println(s.Add(timers.Every("search-rebuild", 10*time.Minute, rebuild,
		timers.WithMaxConcurrency(2),
		timers.WithMaxRunTime(25*time.Minute),
		timers.WithTTL(time.Minute), // a crashed host's slot is free again within a minute
	)))
	fmt.Println(errors.Is(s.Add(timers.Every("bad", time.Minute, rebuild, timers.WithMaxConcurrency(0))), lock.ErrInvalidArgument))
	// Output:
	// <nil>
	// true
}

// A run that fails is retried within its tick, holding its slot: here the
// upstream answers at the third attempt.
func ExampleWithRetries() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l,
		timers.WithClock(startsBefore(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))),
		timers.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	_ = s.Add(timers.Every("sync-rates", time.Hour, func(context.Context) error {
		attempts++
		if attempts < 3 {
			return errors.New("upstream: 503")
		}
		cancel() // one tick is enough for the example
		return nil
	}, timers.WithRetries(5, 10*time.Millisecond)))
	_ = s.Run(ctx)
	st := s.Status()[0]
	fmt.Println(attempts, "attempts;", st.Runs, "run,", st.Failures, "failed, outcome", st.LastRun.Outcome)
	// Output: 3 attempts; 1 run, 0 failed, outcome ok
}

// A host that reaches a tick late (a GC pause, a busy machine, a restart)
// runs it only within the misfire threshold; later, it skips it.
func ExampleWithMisfireThreshold() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Add(timers.Cron("hourly-invoices", "0 * * * *", func(context.Context) error { return nil },
		timers.WithMisfireThreshold(5*time.Minute)))) // a run at 10:04 for the 10:00 tick is still fine
	// Output: <nil>
}

// Cache warming that must go on while the backend is down: each host runs
// the ticks itself, at most one run at a time, and logs each such run.
// Without this option such ticks are skipped.
func ExampleWithRunWhenUnavailable() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Add(timers.Every("warm-cache", 30*time.Second, func(context.Context) error { return nil },
		timers.WithRunWhenUnavailable(1))))
	// Output: <nil>
}

// WithTTL bounds how long a crashed runner keeps its slot: here 20 s for
// a nightly job, instead of the default (the interval, at most 30 s).
func ExampleWithTTL() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	s, err := timers.New(l)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Add(timers.Cron("nightly-export", "0 2 * * *", func(context.Context) error { return nil },
		timers.WithTTL(20*time.Second), timers.WithMaxRunTime(2*time.Hour))))
	// Output: <nil>
}

// Three hosts fire a cache warm-up at every tick, as timer libraries that
// cap the runs with a lock do: with WithRunsPerTick(2) two of them run each
// tick (each on a slot of its own) and the third finds the tick taken.
// Without it, each tick runs on one host.
func ExampleWithRunsPerTick() {
	table, err := memlock.New() // any lock.Lock shared by the fleet
	if err != nil {
		log.Fatal(err)
	}
	warm := func(ctx context.Context) error {
		tick, _ := timers.TickFrom(ctx)
		_ = tick.Slot // 0 or 1: the two runs of a tick hold a slot each
		return nil    // warm this host's cache
	}
	ctx, cancel := context.WithCancel(context.Background())
	var hosts []*timers.Scheduler
	var wg sync.WaitGroup
	for _, owner := range []string{"host-a", "host-b", "host-c"} {
		l, err := table.Share(memlock.WithCommon(lock.Common{Owner: owner}))
		if err != nil {
			log.Fatal(err)
		}
		s, err := timers.New(l, timers.WithClock(startsBefore(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))))
		if err != nil {
			log.Fatal(err)
		}
		if err := s.Add(timers.Every("cache-warm", time.Hour, warm, timers.WithRunsPerTick(2))); err != nil {
			log.Fatal(err)
		}
		hosts = append(hosts, s)
		wg.Go(func() { _ = s.Run(ctx) })
	}
	var runs, elsewhere int64
	for runs+elsewhere < 3 { // until every host has been through the 09:00 tick
		time.Sleep(10 * time.Millisecond)
		runs, elsewhere = 0, 0
		for _, s := range hosts {
			st := s.Status()[0]
			runs, elsewhere = runs+st.Runs, elsewhere+st.Elsewhere
		}
	}
	cancel()
	wg.Wait()
	fmt.Printf("09:00 ran on %d hosts; %d found it taken\n", runs, elsewhere)
	// Output: 09:00 ran on 2 hosts; 1 found it taken
}
