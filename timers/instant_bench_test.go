package timers

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// BenchmarkInstant: the path of one instant's ticks on memlock without the
// dispatcher: 50 ticks of 50 timers claimed together, their slots taken
// together, run (fn does nothing) and released, as runInstant does them;
// a tick is an op (ns/op and allocs/op are per tick).
func BenchmarkInstant(b *testing.B) {
	for _, timers := range []int{50, 10000} {
		b.Run(fmt.Sprint(timers), func(b *testing.B) { benchInstant(b, timers) })
	}
}

func benchInstant(b *testing.B, all int) {
	const per = 50
	l, err := memlock.New()
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(l, WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		b.Fatal(err)
	}
	for i := range all {
		if err := s.Add(Every(fmt.Sprintf("t%d", i), time.Second, func(context.Context) error { return nil })); err != nil {
			b.Fatal(err)
		}
	}
	entries := make([]*entry, 0, all)
	for _, name := range s.order {
		entries = append(entries, s.timers[name])
	}
	ctx := context.Background()
	runCtx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	s.keepers = newKeepers(s.l, s.lockOpts)
	s.pool = newPool()
	defer s.pool.close()
	s.rq = newRunQueues(s.pool)
	s.runCtx = runCtx
	defer s.keepers.close(ctx)
	var runs sync.WaitGroup
	at := time.Now().Truncate(time.Second).Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for n := 0; n < b.N; n += per {
		ticks := make([]due, per)
		for i := range ticks {
			ticks[i] = due{e: entries[(n+i)%all], tick: Tick{At: at}, iv: time.Second}
		}
		// The claims end at the next tick: the clock must not pass it.
		s.set.clock = func() time.Time { return at }
		s.runInstant(ctx, runCtx, &runs, ticks)
		runs.Wait()
		if (n+per)%all == 0 {
			at = at.Add(time.Second)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
