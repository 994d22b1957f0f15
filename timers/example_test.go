package timers_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/lock"
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

func ExampleObserve() {
	l := memlock.New(lock.WithOwner("host-a"))
	// An hourly timer whose clock is just before its next tick.
	now := time.Now()
	offset := now.Truncate(time.Hour).Add(time.Hour - 10*time.Millisecond).Sub(now)
	s := timers.New(l, timers.WithClock(func() time.Time { return time.Now().Add(offset) }))
	ctx, cancel := context.WithCancel(context.Background())
	_ = s.Add(timers.Every("reports", time.Hour, func(context.Context) error {
		defer cancel()
		// What any process that can reach the backend sees, mid-run:
		obs, _ := timers.Observe(context.Background(), l.Share(), "")
		for _, o := range obs {
			fmt.Println(o.Name, "tick claimed by", o.ClaimedBy, "-", len(o.Running), "run in progress on", o.Running[0].Runner)
		}
		return nil
	}))
	_ = s.Run(ctx)
	// Output: reports tick claimed by host-a - 1 run in progress on host-a
}
