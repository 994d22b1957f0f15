package timers_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
	"github.com/leasehold-go/leasehold/timers"
)

func TestMain(m *testing.M) {
	childMain()
	testenv.Main(m)
}

// A host child process runs one timer on its own scheduler, with its clock
// off by TIMERS_OFFSET, until TIMERS_UNTIL (unix ms, wall clock) or for
// TIMERS_FOR, with WithMaxConcurrency(TIMERS_CONCURRENCY) unless it is 0,
// and WithRunsPerTick(TIMERS_RUNS_PER_TICK) if it is set, and prints (wall
// clock, no offset):
//
//	READY <unix ns>                        just before Run
//	START <tick unix ms>                   when a run starts
//	RUN <tick unix ms> <start ns> <end ns> when it ends
//	SKIP <tick unix ms> <unix ns> <reason> per skipped tick, from the log
//	STATUS <runs> <skips> <elsewhere>      at the end

const childEnv = "TIMERS_CHILD"

func childMain() { childproc.Main(childEnv, host) }

func host() error {
	l, err := backends.FromEnv()
	if err != nil {
		return err
	}
	env := func(k string) time.Duration { d, _ := time.ParseDuration(os.Getenv(k)); return d }
	offset, interval, hold := env("TIMERS_OFFSET"), env("TIMERS_INTERVAL"), env("TIMERS_HOLD")
	conc, _ := strconv.Atoi(os.Getenv("TIMERS_CONCURRENCY"))
	var mu sync.Mutex
	say := func(format string, args ...any) { mu.Lock(); fmt.Printf(format+"\n", args...); mu.Unlock() }
	s := testkit.Must(timers.New(l, timers.WithClock(func() time.Time { return time.Now().Add(offset) }), timers.WithShutdownTimeout(time.Second),
		timers.WithCommon(lock.Common{Logger: slog.New(skipLog{say})})))
	fn := func(ctx context.Context) error {
		tick, _ := timers.TickFrom(ctx)
		start := time.Now()
		say("START %d", tick.At.UnixMilli())
		select { // the work: TIMERS_HOLD long, or until the slot is lost or shutdown
		case <-time.After(hold):
		case <-ctx.Done():
		}
		say("RUN %d %d %d", tick.At.UnixMilli(), start.UnixNano(), time.Now().UnixNano())
		return nil
	}
	opts := []timers.Option{timers.WithTTL(time.Second)}
	if conc > 0 {
		opts = append(opts, timers.WithMaxConcurrency(conc))
	}
	if n, err := strconv.Atoi(os.Getenv("TIMERS_RUNS_PER_TICK")); err == nil {
		opts = append(opts, timers.WithRunsPerTick(n))
	}
	if err := s.Add(timers.Every(os.Getenv("TIMERS_NAME"), interval, fn, opts...)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), env("TIMERS_FOR"))
	if ms, err := strconv.ParseInt(os.Getenv("TIMERS_UNTIL"), 10, 64); err == nil {
		cancel()
		ctx, cancel = context.WithDeadline(context.Background(), time.UnixMilli(ms))
	}
	defer cancel()
	say("READY %d", time.Now().UnixNano())
	if err := s.Run(ctx); err != nil {
		return err
	}
	st := s.Status()[0]
	say("STATUS %d %d %d", st.Runs, st.Skips, st.Elsewhere)
	return nil
}

// skipLog prints the scheduler's "tick skipped" log records as SKIP lines.
type skipLog struct{ say func(string, ...any) }

func (skipLog) Enabled(context.Context, slog.Level) bool { return true }
func (h skipLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h skipLog) WithGroup(string) slog.Handler          { return h }

func (h skipLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "leasehold: timer tick skipped" {
		return nil
	}
	var tick time.Time
	reason := "?"
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "tick":
			tick, _ = a.Value.Any().(time.Time)
		case "reason":
			reason = a.Value.String()
		}
		return true
	})
	h.say("SKIP %d %d %s", tick.UnixMilli(), time.Now().UnixNano(), reason)
	return nil
}

func startHost(t *testing.T, b backends.Backend, env ...string) *childproc.Proc {
	t.Helper()
	return childproc.Start(t, append(append(b.Env, childEnv+"=1"), env...)...)
}

type run struct {
	host       int
	tick       int64
	start, end int64
}

type skip struct {
	host     int
	tick, at int64
	reason   string
}

// fleet is what three hosts did around a planned window of ticks.
type fleet struct {
	window    []int64 // the planned ticks, unix ms
	runs      []run
	skips     []skip
	elsewhere int64
}

// threeHosts starts three hosts with clocks −200 ms, 0 and +200 ms off, at
// different moments (300 ms apart), plans a window of ticks that opens
// 5 s after the first start (when every host is up: it fails the test
// if one is not) and runs them until the window closes, then collects
// their runs, skips and final statuses. env is added to every host's.
func threeHosts(t *testing.T, b backends.Backend, name string, interval time.Duration, ticks int, hold time.Duration, conc int, env ...string) fleet {
	t.Helper()
	iv := interval.Nanoseconds()
	from := time.Unix(0, (time.Now().Add(5*time.Second).UnixNano()/iv+1)*iv)
	// The last tick of the window is reached by the host 200 ms behind at
	// +200 ms; the next one by the host 200 ms ahead at −200 ms.
	until := from.Add(time.Duration(ticks)*interval - 300*time.Millisecond)
	var f fleet
	for i := range ticks {
		f.window = append(f.window, from.Add(time.Duration(i)*interval).UnixMilli())
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, offset := range []string{"-200ms", "0s", "200ms"} {
		h := startHost(t, b, append([]string{"TIMERS_NAME=" + name, "TIMERS_OFFSET=" + offset, "TIMERS_INTERVAL=" + interval.String(),
			"TIMERS_UNTIL=" + strconv.FormatInt(until.UnixMilli(), 10), "TIMERS_HOLD=" + hold.String(),
			"TIMERS_CONCURRENCY=" + strconv.Itoa(conc)}, env...)...)
		wg.Go(func() {
			f.read(t, i, h, &mu, func(ready int64) {
				// The host 200 ms ahead computes its first tick 200 ms
				// early: it must be up 250 ms before the window.
				if late := time.Unix(0, ready).Sub(from.Add(-250 * time.Millisecond)); late > 0 {
					t.Errorf("host %d was up %v too late for the window; the machine is too slow for this test's 5 s lead", i, late)
				}
			})
		})
		time.Sleep(300 * time.Millisecond) // the hosts start at different moments
	}
	wg.Wait()
	return f
}

// read collects host i's lines into f (under mu) until it exits; ready is
// given its READY time.
func (f *fleet) read(t *testing.T, i int, h *childproc.Proc, mu *sync.Mutex, ready func(int64)) {
	for line := range h.Lines {
		var r run
		var sk skip
		var at, rs, sks, el int64
		var err error
		mu.Lock()
		switch {
		case strings.HasPrefix(line, "READY "):
			if _, err = fmt.Sscanf(line, "READY %d", &at); err == nil {
				ready(at)
			}
		case strings.HasPrefix(line, "RUN "):
			_, err = fmt.Sscanf(line, "RUN %d %d %d", &r.tick, &r.start, &r.end)
			r.host = i
			f.runs = append(f.runs, r)
		case strings.HasPrefix(line, "SKIP "):
			_, err = fmt.Sscanf(line, "SKIP %d %d %s", &sk.tick, &sk.at, &sk.reason)
			sk.host = i
			f.skips = append(f.skips, sk)
		case strings.HasPrefix(line, "STATUS "):
			_, err = fmt.Sscanf(line, "STATUS %d %d %d", &rs, &sks, &el)
			f.elsewhere += el
		case strings.HasPrefix(line, "ERROR"):
			t.Errorf("host %d: %s", i, line)
		}
		mu.Unlock()
		if err != nil {
			t.Errorf("host %d: %q: %v", i, line, err)
		}
	}
}

// byTick counts the runs and the skips (by reason) of each tick across the
// hosts.
func (f fleet) byTick() (runs map[int64][]int, skips map[int64][]string) {
	runs, skips = map[int64][]int{}, map[int64][]string{}
	for _, r := range f.runs {
		runs[r.tick] = append(runs[r.tick], r.host)
	}
	for _, s := range f.skips {
		skips[s.tick] = append(skips[s.tick], s.reason)
	}
	return runs, skips
}

// Three hosts, interval 1 s, a window of 12 ticks while all three are up:
// each of the 12 ticks runs exactly once, and no tick ever runs twice.
func TestOncePerTickAcrossProcesses(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		f := threeHosts(t, b, "once-"+uniq(), time.Second, 12, 10*time.Millisecond, 1)
		runs, skips := f.byTick()
		for tick, hosts := range runs {
			if len(hosts) > 1 {
				t.Errorf("tick %d ran on hosts %v", tick, hosts)
			}
		}
		for _, tick := range f.window {
			if len(runs[tick]) != 1 {
				t.Errorf("tick %d of the window ran %d times (skipped: %v)", tick, len(runs[tick]), skips[tick])
			}
		}
		if f.elsewhere == 0 {
			t.Error("no host ever found a tick claimed by another: the hosts did not compete")
		}
		t.Logf("%d ticks of the window each ran once (%d runs in all); %d claims found taken by another host", len(f.window), len(f.runs), f.elsewhere)
	})
}

// WithMaxConcurrency(2) with runs of 2.5 intervals, over a window of 12 ticks
// while all three hosts are up. At tick k the runs of k−1 and k−2 hold
// both slots (k−3's ended at k−0.5), so the ticks go run, run, busy: a
// third of them, 4 in any 12, are skipped as busy. Allowing one tick of
// slack each way for timing at the edges, the window must have 3 to 5 busy
// skips, each while two runs held the slots, at most one misfire, every
// tick run once or skipped, and exactly 2 runs at once at the peak.
func TestMaxConcurrencyAcrossProcesses(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		f := threeHosts(t, b, "conc-"+uniq(), time.Second, 12, 2500*time.Millisecond, 2)
		type edge struct {
			at int64
			d  int
		}
		var edges []edge
		for _, r := range f.runs {
			edges = append(edges, edge{r.start, 1}, edge{r.end, -1})
		}
		sort.Slice(edges, func(i, j int) bool {
			if edges[i].at == edges[j].at {
				return edges[i].d < edges[j].d
			}
			return edges[i].at < edges[j].at
		})
		n, peak := 0, 0
		for _, e := range edges {
			n += e.d
			peak = max(peak, n)
		}
		if peak != 2 {
			t.Errorf("%d runs at once at the peak with WithMaxConcurrency(2) and runs of 2.5 intervals, want exactly 2", peak)
		}
		runs, skips := f.byTick()
		reasons := map[string]int{}
		for _, tick := range f.window {
			for _, r := range skips[tick] {
				reasons[r]++
			}
			if len(runs[tick])+len(skips[tick]) != 1 {
				t.Errorf("tick %d of the window: runs on hosts %v, skips %v; want one run or one skip", tick, runs[tick], skips[tick])
			}
		}
		if reasons["busy"] < 3 || reasons["busy"] > 5 || reasons["misfire"] > 1 || len(reasons) > 2 || (len(reasons) == 2 && reasons["misfire"] == 0) {
			t.Errorf("skips in the window of 12 ticks by reason: %v; want 3 to 5 busy (4: every third tick), at most 1 misfire, nothing else", reasons)
		}
		// A busy skip with a free slot would queue nothing but lose a run:
		// at each, two runs were in progress (their slots are released
		// just after their RUN line: 250 ms of allowance).
		for _, s := range f.skips {
			if s.reason != "busy" {
				continue
			}
			holding := 0
			for _, r := range f.runs {
				if r.start <= s.at && s.at <= r.end+(250*time.Millisecond).Nanoseconds() {
					holding++
				}
			}
			if holding < 2 {
				t.Errorf("tick %d skipped as busy on host %d while %d runs were in progress", s.tick, s.host, holding)
			}
		}
		t.Logf("%d runs, at most %d at once; skips in the window of %d ticks: %v", len(f.runs), peak, len(f.window), reasons)
	})
}

// A runner SIGKILLed mid-run frees its slot within the slot's ttl (1 s).
func TestKilledRunnerFreesItsSlot(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		name := "killed-" + uniq()
		h := startHost(t, b, "TIMERS_NAME="+name, "TIMERS_OFFSET=0s", "TIMERS_INTERVAL=1s", "TIMERS_FOR=1m",
			"TIMERS_HOLD=1h", "TIMERS_CONCURRENCY=1")
		h.Expect(t, "START ", 30*time.Second)
		h.Signal(t, syscall.SIGKILL)
		killed := time.Now()
		sem, err := semaphore.New(b.New(t), "timer/"+name, 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second+time.Second)
		defer cancel()
		p, err := sem.Acquire(ctx, time.Second)
		if err != nil {
			t.Fatalf("the killed runner's slot was not free within its 1 s ttl + 1 s: %v", err)
		}
		t.Logf("slot free %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
		_ = p.Release(t.Context())
	})
}

// WithRunsPerTick(2) on three hosts whose clocks are 200 ms apart, runs
// of 10 ms, a window of 10 ticks while all three are up: each tick runs
// exactly twice, on two hosts, never three times (the host 200 ms behind
// reaches a tick when its first runs have ended: only the claims stop it),
// and the third host finds the tick taken.
func TestRunsPerTickAcrossProcesses(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		f := threeHosts(t, b, "per-tick-"+uniq(), time.Second, 10, 10*time.Millisecond, 0, "TIMERS_RUNS_PER_TICK=2")
		runs, skips := f.byTick()
		for tick, hosts := range runs {
			if len(hosts) > 2 || (len(hosts) == 2 && hosts[0] == hosts[1]) {
				t.Errorf("tick %d ran on hosts %v: want at most 2 runs, on 2 hosts", tick, hosts)
			}
		}
		for _, tick := range f.window {
			if len(runs[tick]) != 2 {
				t.Errorf("tick %d of the window ran on hosts %v (skipped: %v), want 2", tick, runs[tick], skips[tick])
			}
		}
		if f.elsewhere < int64(len(f.window)) {
			t.Errorf("%d ticks found taken elsewhere over a window of %d: want the third host to find each taken", f.elsewhere, len(f.window))
		}
		t.Logf("%d ticks of the window each ran twice (%d runs in all); %d found taken", len(f.window), len(f.runs), f.elsewhere)
	})
}

// WithRunsPerTick(2): a runner SIGKILLed mid-run holds one of the two
// slots until its ttl (1 s) ends, and the tick it was running is not run
// again beyond two: the two hosts left run it at most once more (the one
// that reaches it last finds a free slot, but no free claim), and every
// tick from 1.5 s after the kill runs twice (its slot is free again).
func TestRunsPerTickKilledRunner(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		name := "per-tick-killed-" + uniq()
		env := func(offset, hold string) []string {
			return []string{"TIMERS_NAME=" + name, "TIMERS_OFFSET=" + offset, "TIMERS_INTERVAL=1s", "TIMERS_FOR=25s",
				"TIMERS_HOLD=" + hold, "TIMERS_CONCURRENCY=0", "TIMERS_RUNS_PER_TICK=2"}
		}
		var f fleet
		var mu sync.Mutex
		var wg sync.WaitGroup
		// The victim's clock is ahead: it reaches each tick first and takes
		// one of its claims. The host 200 ms behind reaches the victim's
		// tick when the other run has ended and freed its slot.
		for i, offset := range []string{"0s", "-200ms"} {
			h := startHost(t, b, env(offset, "10ms")...)
			h.Expect(t, "READY ", 30*time.Second)
			wg.Go(func() { f.read(t, i, h, &mu, func(int64) {}) })
		}
		victim := startHost(t, b, env("200ms", "1h")...)
		line := victim.Expect(t, "START ", 30*time.Second)
		victim.Signal(t, syscall.SIGKILL)
		killed := time.Now()
		killedTick, err := strconv.ParseInt(strings.TrimPrefix(line, "START "), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		runs, skips := f.byTick()
		if hosts := runs[killedTick]; len(hosts) > 1 {
			t.Errorf("the killed runner's tick %d ran again on hosts %v: 3 runs with WithRunsPerTick(2)", killedTick, hosts)
		}
		freed := killed.Add(1500 * time.Millisecond).Truncate(time.Second).Add(time.Second).UnixMilli()
		checked := 0
		for tick := freed; tick < killed.Add(12*time.Second).UnixMilli(); tick += 1000 {
			checked++
			if len(runs[tick]) != 2 {
				t.Errorf("tick %d, %v after the kill, ran on hosts %v (skipped: %v), want 2: the killed runner's slot is not free",
					tick, time.UnixMilli(tick).Sub(killed).Round(time.Millisecond), runs[tick], skips[tick])
			}
		}
		t.Logf("killed mid-run of tick %d; %d later ticks each ran twice", killedTick, checked)
	})
}

func uniq() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }
