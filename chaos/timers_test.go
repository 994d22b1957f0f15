package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/timers"
)

// timerInterval is the period of the timers workload's timer.
const timerInterval = 250 * time.Millisecond

// The timers workload: every worker runs the same timer on its own
// scheduler, through its own proxy; each run writes to the fenced resource
// of its slot with its slot's token until its context ends.
func TestNemesisTimers(t *testing.T) {
	for name, tg := range map[string]func(*testing.T) target{"redis": redisTarget, "postgres": postgresTarget, "etcd": etcdTarget} {
		for _, conc := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/MaxConcurrency=%d", name, conc), func(t *testing.T) {
				t.Parallel()
				c := chaosConfig(t)
				c.timers = conc
				runNemesis(t, tg(t), c)
			})
		}
		// Up to 2 of the 4 workers run each tick, on 2 slots.
		t.Run(name+"/RunsPerTick=2", func(t *testing.T) {
			t.Parallel()
			c := chaosConfig(t)
			c.timers, c.perTick = 2, 2
			runNemesis(t, tg(t), c)
		})
	}
}

// runTimers is one host of the timers workload. A run is recorded as a
// grant of its slot from fn's start to the end of fn's context (or fn's
// return); its release is the scheduler's, unobserved here.
func runTimers(ctx context.Context, id int, l lock.Lock, name string, conc, perTick int, ttl time.Duration,
	fenceFor func(key string) *lock.Fence, h *history, stall chan time.Duration, seed int64) {
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(seed), 3))
	randDuration := func(from, to time.Duration) time.Duration {
		rngMu.Lock()
		defer rngMu.Unlock()
		return from + time.Duration(rng.Int64N(int64(to-from)))
	}
	// With one slot a run ends before the next tick; with more, runs
	// overlap the next ticks; with several runs per tick, a tick's runs
	// hold the slots up to the next tick.
	longest := timerInterval / 2
	switch {
	case perTick > 1:
		longest = timerInterval
	case conc > 1:
		longest = timerInterval * time.Duration(conc)
	}
	fn := func(rctx context.Context) error {
		tick, _ := timers.TickFrom(rctx)
		token, _ := lock.TokenFrom(rctx)
		g := grant{Worker: id, Key: fmt.Sprintf("slot%d", tick.Slot), Token: token, Start: time.Now(), Tick: tick.At, Release: "unobserved"}
		ended := endOf(rctx)
		fence := fenceFor(g.Key)
		until := time.Now().Add(randDuration(timerInterval/10, longest))
		for time.Now().Before(until) {
			select {
			case <-stall: // a stalled run is the lock workload's
			default:
			}
			now := time.Now()
			if rctx.Err() != nil {
				break
			}
			accepted := fence.Do(token, nil) == nil
			h.addWrite(write{Worker: id, Key: g.Key, Token: token, At: now, Accepted: accepted})
			time.Sleep(randDuration(5*time.Millisecond, 25*time.Millisecond))
		}
		g.End = ended()
		if g.LossSeen = rctx.Err() != nil; g.LossSeen {
			g.LossAt = g.End
		}
		g.ValidUntil = g.End
		h.addGrant(g)
		return nil
	}
	s := testkit.Must(timers.New(l, timers.WithShutdownTimeout(time.Second)))
	if err := s.Add(timers.Every(name, timerInterval, fn, timers.WithMaxConcurrency(conc), timers.WithRunsPerTick(max(perTick, 1)),
		timers.WithTTL(ttl), timers.WithMaxRunTime(2*longest))); err != nil {
		panic(err)
	}
	_ = s.Run(ctx)
}

// checkTicks checks the timers workload's ticks:
//
//   - once per tick (runs per tick, with PerTick n > 1): no tick ran more
//     than n times, unless a restart that lost the grants, or a reset
//     that freed a runner's claim (PostgreSQL), fell in the tick's claim
//     window, from the tick to its misfire threshold (a claim granted
//     later is not run);
//   - liveness: at least a third of the ticks between the first and the
//     last second of the run ran somewhere, leaving out those during a
//     failover or a restart that lost the grants, and a second and a ttl
//     after it (duringOutage: a quarantining server grants nothing then).
func (h *history) checkTicks() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	threshold := h.Interval / 2 // the default misfire threshold
	runs := map[time.Time][]grant{}
	for _, g := range h.Grants {
		if !g.Tick.IsZero() {
			runs[g.Tick] = append(runs[g.Tick], g)
		}
	}
	var bad []string
	ticks := make([]time.Time, 0, len(runs))
	for tick := range runs {
		ticks = append(ticks, tick)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	perTick, rule := max(h.PerTick, 1), "once per tick"
	if perTick > 1 {
		rule = fmt.Sprintf("%d runs per tick", perTick)
	}
	for _, tick := range ticks {
		rs := runs[tick]
		if len(rs) <= perTick {
			continue
		}
		if why := h.claimFreed(tick, tick.Add(threshold), rs); why != "" {
			h.Relaxed = append(h.Relaxed, fmt.Sprintf("tick %s ran %d times: %s", ts(tick), len(rs), why))
			continue
		}
		bad = append(bad, fmt.Sprintf("%s: tick %s ran %d times (workers %v)", rule, ts(tick), len(rs), workers(rs)))
	}
	if h.Interval > 0 && !h.Begin.IsZero() {
		from, to := h.Begin.Add(time.Second).Truncate(h.Interval), h.Finish.Add(-time.Second)
		expected, ran := 0, 0
		for at := from.Add(h.Interval); at.Before(to); at = at.Add(h.Interval) {
			if h.duringOutage(at) {
				continue
			}
			expected++
			if len(runs[at]) > 0 {
				ran++
			}
		}
		h.Relaxed = append(h.Relaxed, fmt.Sprintf("%d of %d ticks ran", ran, expected))
		if 3*ran < expected {
			bad = append(bad, fmt.Sprintf("liveness: only %d of %d ticks ran", ran, expected))
		}
	}
	return bad
}

// claimFreed says why the claim of a tick could have been granted twice
// between from and to: a restart that lost the grants, or a reset of a
// runner's connection on a backend where a reset frees its grants.
func (h *history) claimFreed(from, to time.Time, rs []grant) string {
	for _, at := range h.Losses {
		if !at.Before(from.Add(-100*time.Millisecond)) && !at.After(to) {
			return "a restart lost its claim at " + ts(at)
		}
	}
	if !h.ResetFrees {
		return ""
	}
	for _, c := range h.Cuts {
		for _, g := range rs {
			if c.Kind == "reset" && c.Worker == g.Worker && !c.From.Before(from) && !c.From.After(to) {
				return fmt.Sprintf("a reset of worker %d freed its claim at %s", c.Worker, ts(c.From))
			}
		}
	}
	return ""
}

func workers(gs []grant) []int {
	var ws []int
	for _, g := range gs {
		ws = append(ws, g.Worker)
	}
	return ws
}

// The checks of the runs-per-tick model must be able to fail: with
// PerTick 2 and two slots, a tick run three times breaks "2 runs per
// tick" (as a scheduler whose claims counted only the slots would: a host
// that reaches the tick after its first two runs ended finds a free slot),
// and three runs at once break the limit of 2.
func TestRunsPerTickCheckerCatchesViolations(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	run := func(worker, slot, tick, from, to int) grant {
		return grant{Worker: worker, Key: fmt.Sprintf("slot%d", slot), Token: uint64(from), Tick: at(tick), Start: at(from), End: at(to), ValidUntil: at(to), Release: "unobserved"}
	}
	// Every tick of a 3 s run ran twice, on two workers, at 250 ms intervals.
	twiceEach := func() []grant {
		var gs []grant
		for tick := 0; tick <= 3000; tick += 250 {
			gs = append(gs, run(tick/250%4, 0, tick, tick+5, tick+50), run((tick/250+1)%4, 1, tick, tick+10, tick+60))
		}
		return gs
	}
	base := func(gs []grant) *history {
		return &history{Interval: 250 * time.Millisecond, PerTick: 2, Limit: 2, Begin: at(0), Finish: at(3000), Grants: gs}
	}
	for _, c := range []struct {
		name string
		h    *history
		want string
	}{
		{"clean", base(twiceEach()), ""},
		{"a third run of a tick after the first two ended", base(append(twiceEach(), run(2, 0, 1000, 1200, 1220))), "2 runs per tick"},
		{"three runs at once", func() *history {
			gs := twiceEach()
			gs[6].End, gs[6].ValidUntil = at(1030), at(1030) // a run of tick 750 still going when tick 1000's two start
			return base(gs)
		}(), "limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := append(c.h.check(), c.h.checkTicks()...)
			switch {
			case c.want == "" && len(bad) > 0:
				t.Fatalf("violations in a clean history: %v", bad)
			case c.want != "" && (len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), c.want)):
				t.Fatalf("want a %q violation, got %v", c.want, bad)
			}
		})
	}
}
