package timers_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

func ExampleScheduler_Add() {
	s := timers.New(memlock.New()) // any lock.Lock shared by the fleet
	report := func(ctx context.Context) error {
		tick, _ := timers.TickFrom(ctx)
		fmt.Println("report for", tick.At)
		return nil
	}
	fmt.Println(s.Add(timers.Every("reports", time.Minute, report, timers.MaxConcurrency(3), timers.SpreadStart())))
	fmt.Println(s.Add(timers.Cron("cleanup", "30 3 * * *", report, timers.MaxRunTime(time.Hour))))
	fmt.Println(s.Add(timers.Every("reports", time.Hour, report)))
	fmt.Println(s.Add(timers.Cron("bad", "61 * * * *", report)) != nil)
	// Output:
	// <nil>
	// <nil>
	// lock: invalid argument: a timer called "reports" is already registered
	// true
}

func ExampleScheduler_Run() {
	s := timers.New(memlock.New())
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
		timers.InLocation(berlin), timers.RetryOnError(3, time.Minute), timers.MaxRunTime(30*time.Minute))
	fmt.Println(timers.New(memlock.New()).Add(t))
	// Output: <nil>
}
