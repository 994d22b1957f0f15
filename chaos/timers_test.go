package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
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
	}
}

// runTimers is one host of the timers workload. A run is recorded as a
// grant of its slot from fn's start to the end of fn's context (or fn's
// return); its release is the scheduler's, unobserved here.
func runTimers(ctx context.Context, id int, l lock.Lock, name string, conc int, ttl time.Duration,
	fenceFor func(key string) *lock.Fence, h *history, stall chan time.Duration, seed int64) {
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(seed), 3))
	randDuration := func(from, to time.Duration) time.Duration {
		rngMu.Lock()
		defer rngMu.Unlock()
		return from + time.Duration(rng.Int64N(int64(to-from)))
	}
	// With one slot a run ends before the next tick; with more, runs
	// overlap the next ticks.
	longest := timerInterval / 2
	if conc > 1 {
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
	if err := s.Add(timers.Every(name, timerInterval, fn, timers.WithMaxConcurrency(conc), timers.WithTTL(ttl),
		timers.WithMaxRunTime(2*longest))); err != nil {
		panic(err)
	}
	_ = s.Run(ctx)
}

// checkTicks checks the timers workload's ticks:
//
//   - once per tick: no tick ran twice, unless a restart that lost the
//     grants, or a reset that freed a runner's claim (PostgreSQL), fell in
//     the tick's claim window, from the tick to its misfire threshold (a
//     claim granted later is not run);
//   - liveness: at least a third of the ticks between the first and the
//     last second of the run ran somewhere.
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
	for _, tick := range ticks {
		rs := runs[tick]
		if len(rs) < 2 {
			continue
		}
		if why := h.claimFreed(tick, tick.Add(threshold), rs); why != "" {
			h.Relaxed = append(h.Relaxed, fmt.Sprintf("tick %s ran %d times: %s", ts(tick), len(rs), why))
			continue
		}
		bad = append(bad, fmt.Sprintf("once per tick: tick %s ran %d times (workers %v)", ts(tick), len(rs), workers(rs)))
	}
	if h.Interval > 0 && !h.Begin.IsZero() {
		from, to := h.Begin.Add(time.Second).Truncate(h.Interval), h.Finish.Add(-time.Second)
		expected, ran := 0, 0
		for at := from.Add(h.Interval); at.Before(to); at = at.Add(h.Interval) {
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
