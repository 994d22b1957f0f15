package timers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/timers"
)

// On PostgreSQL a grant holds a pooled connection until it ends. Tick
// claims used to be grants left to lapse after the interval plus the
// misfire threshold, so every timer held a connection all the time and a
// scheduler with more timers than pool connections stalled (and each tick
// opened a new connection, 8 ms of BenchmarkTick's 8.4 ms start latency).
// Claims go through lock.Claim now, which on pglock holds none: six
// timers run every tick on a pool of two connections.
func TestTickClaimsHoldNoConnection(t *testing.T) {
	ctx := t.Context()
	l, err := pglock.NewFromDSN(ctx, testenv.Postgres(t).DSN()+"&pool_max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	s := testkit.Must(timers.New(l))
	const n, interval, span = 6, 100 * time.Millisecond, 2 * time.Second
	var runs [n]atomic.Int64
	for i := range n {
		if err := s.Add(timers.Every(fmt.Sprintf("pool-%s-%d", uniq(), i), interval, func(context.Context) error {
			runs[i].Add(1)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, span)
	defer cancel()
	if err := s.Run(rctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		// About 20 ticks; on a loaded machine misfires take a few, and the
		// tick that Run's end cuts short is skipped (unavailable). With
		// claims that held connections, none ran.
		if got := runs[i].Load(); got < int64(span/interval)/2 {
			t.Errorf("timer %d ran %d times in %v at %v, want about %d", i, got, span, interval, span/interval)
		}
	}
}

// Host A (clock +300 ms) claims and runs a tick, then shuts down and closes
// its Lock; host B (clock −300 ms) reaches the same tick 600 ms later.
// Interval 2 s: the clocks differ by 600 ms < interval/2, so the tick must
// run once. On pglock the claim was a session, which ended with A's Lock,
// and B ran the tick again; a claim is a row now (lock.Claim).
//
// A stops when its run has run (its function ends A's Run), not at a
// deadline: a deadline 100 ms after A reached the tick cut A's slot call
// short on a loaded machine once its claim had landed, and then neither
// host ran the tick (since fixed: a claimed tick runs through the
// shutdown, TestShutdownAfterAClaimRunsItsTick).
func TestClaimOutlivesItsClaimersShutdown(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		la, lb := b.New(t), b.New(t)
		var mu sync.Mutex
		ran := map[int64]int{}
		record := func(ctx context.Context) {
			tick, _ := timers.TickFrom(ctx)
			mu.Lock()
			ran[tick.At.UnixMilli()]++
			mu.Unlock()
		}
		const iv = 2 * time.Second
		name := "outlives-" + uniq()
		// The next tick at least 1 s away.
		now := time.Now()
		tick := now.Truncate(iv).Add(iv)
		if tick.Sub(now) < time.Second {
			tick = tick.Add(iv)
		}
		// A's deadline is a fallback only: its run of the tick ends A's Run.
		ctxA, cancelA := context.WithDeadline(t.Context(), tick.Add(iv/2))
		defer cancelA()
		ctxB, cancelB := context.WithDeadline(t.Context(), tick.Add(500*time.Millisecond))
		defer cancelB()
		sa := testkit.Must(timers.New(la, timers.WithClock(func() time.Time { return time.Now().Add(300 * time.Millisecond) })))
		sb := testkit.Must(timers.New(lb, timers.WithClock(func() time.Time { return time.Now().Add(-300 * time.Millisecond) })))
		if err := sa.Add(timers.Every(name, iv, func(ctx context.Context) error {
			record(ctx)
			if at, _ := timers.TickFrom(ctx); at.At.Equal(tick) {
				cancelA() // A has run the tick: it shuts down
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		if err := sb.Add(timers.Every(name, iv, func(ctx context.Context) error { record(ctx); return nil })); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var closedA time.Time
		wg.Go(func() {
			_ = sa.Run(ctxA)
			if c, ok := la.(interface{ Close() error }); ok {
				_ = c.Close()
			}
			closedA = time.Now()
		})
		wg.Go(func() { _ = sb.Run(ctxB) })
		wg.Wait()
		t.Logf("%s: runs per tick %v (A: %+v, B: %+v); A's Lock closed %v before B reached the tick",
			b.Name, ran, sa.Status()[0].Runs, sb.Status()[0].Runs, tick.Add(300*time.Millisecond).Sub(closedA).Round(time.Millisecond))
		if ran[tick.UnixMilli()] != 1 {
			t.Errorf("tick ran %d times, want once", ran[tick.UnixMilli()])
		}
	})
}
