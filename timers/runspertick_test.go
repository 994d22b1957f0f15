package timers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

// hostRuns records which hosts ran each tick, and the most runs at once.
type hostRuns struct {
	mu      sync.Mutex
	hosts   map[int64][]int // by tick, unix ms
	running atomic.Int64
	peak    atomic.Int64
}

func (r *hostRuns) fn(host int, hold time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		tick, _ := timers.TickFrom(ctx)
		r.mu.Lock()
		if r.hosts == nil {
			r.hosts = map[int64][]int{}
		}
		r.hosts[tick.At.UnixMilli()] = append(r.hosts[tick.At.UnixMilli()], host)
		r.mu.Unlock()
		n := r.running.Add(1)
		defer r.running.Add(-1)
		for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
		}
		time.Sleep(hold)
		return nil
	}
}

// skewedHosts runs one timer with WithRunsPerTick(n) on three hosts of one
// memlock table, clocks −200 ms, 0 and +200 ms off, started 700 ms apart,
// for d from epoch; fn holds each run for hold.
func skewedHosts(t *testing.T, name string, n int, hold, d time.Duration) (*hostRuns, []*timers.Scheduler, *memlock.Lock) {
	t.Helper()
	time.Sleep(time.Until(epoch))
	table := testkit.Must(memlock.New())
	r := &hostRuns{}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var wg sync.WaitGroup
	var schedulers []*timers.Scheduler
	for i, skew := range []time.Duration{-200 * time.Millisecond, 0, 200 * time.Millisecond} {
		l := testkit.Must(table.Share(memlock.WithCommon(lock.Common{Owner: fmt.Sprintf("host-%d", i)})))
		s := testkit.Must(timers.New(l, timers.WithClock(func() time.Time { return time.Now().Add(skew) })))
		if err := s.Add(timers.Every(name, time.Second, r.fn(i, hold), timers.WithRunsPerTick(n), timers.WithTTL(time.Second))); err != nil {
			t.Fatal(err)
		}
		schedulers = append(schedulers, s)
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 700 * time.Millisecond) // started at different moments
			_ = s.Run(ctx)
		})
	}
	wg.Wait()
	return r, schedulers, table
}

// WithRunsPerTick(2) on three hosts whose clocks are 200 ms apart, with
// runs that end at once: every tick runs exactly twice, on two hosts, and
// the third finds it taken (Elsewhere). The host 200 ms behind reaches
// each tick 400 ms after the one ahead, when the first runs have long
// ended and their slots are free: only the tick's claims keep it from a
// third run. Observe shows the last tick's two claims and their owners.
func TestRunsPerTickAcrossSkewedHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, schedulers, table := skewedHosts(t, "per-tick", 2, 0, 30500*time.Millisecond)
		r.mu.Lock()
		defer r.mu.Unlock()
		for tick, hosts := range r.hosts {
			if len(hosts) > 2 || (len(hosts) == 2 && hosts[0] == hosts[1]) {
				t.Errorf("tick %v ran on hosts %v: want at most 2 runs, on 2 hosts", tick, hosts)
			}
		}
		// Every host is up from 1.4 s: ticks 2 to 30 each ran twice.
		for k := 2; k <= 30; k++ {
			if hosts := r.hosts[epoch.Add(time.Duration(k)*time.Second).UnixMilli()]; len(hosts) != 2 {
				t.Errorf("tick %d ran on hosts %v, want 2", k, hosts)
			}
		}
		var elsewhere, runs int64
		for _, s := range schedulers {
			st := s.Status()[0]
			elsewhere += st.Elsewhere
			runs += st.Runs
			if st.Skips != 0 || st.Failures != 0 {
				t.Errorf("status %+v: want no skips and no failures", st)
			}
		}
		if elsewhere < 29 || elsewhere > 30 || runs < 58 {
			t.Errorf("%d runs, %d ticks found taken elsewhere: want at least 58 runs and 29 to 30 ticks elsewhere (one host a tick)", runs, elsewhere)
		}
		obs, err := timers.Observe(t.Context(), table, "per-tick")
		if err != nil {
			t.Fatal(err)
		}
		if len(obs) != 1 || !obs[0].LastTick.Equal(epoch.Add(30*time.Second)) || len(obs[0].ClaimOwners) != 2 || obs[0].ClaimOwners[0] == obs[0].ClaimOwners[1] {
			t.Errorf("observed %+v: want tick 30 claimed by two hosts", obs)
		}
	})
}

// WithRunsPerTick(2) on three hosts with runs of 2.5 s every second: never
// more than 2 runs at once (the timer's 2 slots). Tick k's two runs hold
// both slots until k+2.5 s, so ticks k+1 and k+2 are skipped as busy on
// the hosts that claimed them, and tick k+3 runs twice again.
func TestRunsPerTickCapsRunsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, schedulers, _ := skewedHosts(t, "per-tick-long", 2, 2500*time.Millisecond, 15500*time.Millisecond)
		if p := r.peak.Load(); p != 2 {
			t.Errorf("%d runs at once at the peak, want exactly 2", p)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for tick, hosts := range r.hosts {
			if len(hosts) > 2 {
				t.Errorf("tick %v ran on hosts %v", tick, hosts)
			}
		}
		var busy int64
		for _, s := range schedulers {
			st := s.Status()[0]
			if st.Skips > 0 && st.LastSkip.Reason != "busy" {
				t.Errorf("status %+v: want busy skips only", st)
			}
			busy += st.Skips
		}
		if busy < 10 {
			t.Errorf("%d busy skips: want the ticks between two runs skipped", busy)
		}
	})
}
