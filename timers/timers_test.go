package timers_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata" // the DST test needs America/New_York everywhere

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

var epoch = time.Date(2030, 3, 1, 12, 0, 0, 0, time.UTC)

// runFor runs s for d of bubble time and returns when Run has returned.
func runFor(t *testing.T, s *timers.Scheduler, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// record collects the tick instants a timer ran for.
type record struct {
	mu    sync.Mutex
	ticks []time.Time
	at    []time.Time
}

func (r *record) fn(ctx context.Context) error {
	tick, _ := timers.TickFrom(ctx)
	r.mu.Lock()
	r.ticks = append(r.ticks, tick.At)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	return nil
}

func TestEveryTicksAlignToTheEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch.Add(1234 * time.Millisecond))) // start at an odd moment
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var r record
		if err := s.Add(timers.Every("every", 10*time.Second, r.fn)); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 35*time.Second)
		want := []time.Time{epoch.Add(10 * time.Second), epoch.Add(20 * time.Second), epoch.Add(30 * time.Second)}
		if len(r.ticks) != 3 {
			t.Fatalf("ticks %v, want %v", r.ticks, want)
		}
		for i := range want {
			if !r.ticks[i].Equal(want[i]) || !r.at[i].Equal(want[i]) {
				t.Fatalf("tick %d at %v (ran at %v), want %v", i, r.ticks[i], r.at[i], want[i])
			}
		}
	})
}

func TestSpreadStartIsAStablePhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		phases := map[string]time.Duration{}
		for _, name := range []string{"alpha", "beta", "alpha"} {
			s := testkit.Must(timers.New(testkit.Must(memlock.New())))
			var r record
			if err := s.Add(timers.Every(name, time.Minute, r.fn, timers.WithSpreadStart())); err != nil {
				t.Fatal(err)
			}
			runFor(t, s, time.Minute)
			if len(r.ticks) != 1 {
				t.Fatalf("%s: %d ticks in a minute", name, len(r.ticks))
			}
			phase := time.Duration(r.ticks[0].UnixNano() % int64(time.Minute))
			if p, seen := phases[name]; seen && p != phase {
				t.Fatalf("%s: phase %v then %v", name, p, phase)
			}
			phases[name] = phase
		}
		if phases["alpha"] == phases["beta"] {
			t.Fatalf("alpha and beta share the phase %v", phases["alpha"])
		}
	})
}

func newYork(t *testing.T) *time.Location {
	t.Helper()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	return ny
}

func TestCronAcrossDaylightSavingTime(t *testing.T) {
	ny := newYork(t)
	synctest.Test(t, func(t *testing.T) {
		// 2030-03-10 is the spring-forward day in New York: 02:30 does not
		// exist, so "30 2 * * *" does not fire that day.
		time.Sleep(time.Until(time.Date(2030, 3, 8, 12, 0, 0, 0, ny)))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var r record
		if err := s.Add(timers.Cron("nightly", "30 2 * * *", r.fn, timers.WithLocation(ny))); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 4*24*time.Hour)
		want := []string{"2030-03-09 02:30 EST", "2030-03-11 02:30 EDT", "2030-03-12 02:30 EDT"}
		var got []string
		for _, tk := range r.ticks {
			got = append(got, tk.In(ny).Format("2006-01-02 15:04 MST"))
		}
		if len(got) != len(want) {
			t.Fatalf("ticks %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("ticks %v, want %v", got, want)
			}
		}
	})
}

func TestCronDescriptorsAndEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch.Add(time.Second)))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var hourly, every record
		if err := s.Add(timers.Cron("hourly", "@hourly", hourly.fn)); err != nil {
			t.Fatal(err)
		}
		if err := s.Add(timers.Cron("every", "@every 30m", every.fn)); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 3*time.Hour)
		if len(hourly.ticks) != 3 || !hourly.ticks[0].Equal(epoch.Add(time.Hour)) {
			t.Fatalf("@hourly ticks %v", hourly.ticks)
		}
		if len(every.ticks) != 6 || !every.ticks[0].Equal(epoch.Add(30*time.Minute)) {
			t.Fatalf("@every 30m ticks %v (aligned to the epoch like Every)", every.ticks)
		}
	})
}

// A host whose clock reaches a tick later than the threshold skips it.
func TestMisfireSkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		var skew atomic.Int64
		s := testkit.Must(timers.New(testkit.Must(memlock.New()), timers.WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })))
		var r record
		if err := s.Add(timers.Every("misfire", 10*time.Second, r.fn, timers.WithMisfireThreshold(time.Second))); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(15 * time.Second)
			skew.Store(int64(6 * time.Second)) // the clock jumps: the 20 s tick is seen at 21+ s
		}()
		runFor(t, s, 45*time.Second)
		st := s.Status()[0]
		if st.Skips < 1 || st.LastSkip.Reason != "misfire" {
			t.Fatalf("status %+v: want a misfire skip", st)
		}
		for _, tk := range r.ticks {
			if tk.Equal(epoch.Add(20 * time.Second)) {
				t.Fatalf("the misfired tick ran: %v", r.ticks)
			}
		}
	})
}

// A host that reaches ticks later than their next one, but within a
// misfire threshold longer than the interval, runs them: the claims and
// slots of an instant were bounded by its ticks' next ones, already past,
// and every tick of it was skipped (reason error), the hardly late ones
// too.
func TestLateTicksWithinTheThresholdRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		var skew atomic.Int64
		s := testkit.Must(timers.New(testkit.Must(memlock.New()),
			timers.WithClock(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })))
		var r record
		if err := s.Add(timers.Every("late", time.Second, r.fn, timers.WithMisfireThreshold(5*time.Second), timers.WithMaxConcurrency(2))); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(2200 * time.Millisecond)
			skew.Store(int64(1500 * time.Millisecond)) // a pause: ticks 3 (1.5 s late) and 4 (0.5 s) reached together
		}()
		runFor(t, s, 5200*time.Millisecond)
		if st := s.Status()[0]; st.Skips != 0 {
			t.Fatalf("%d ticks skipped (last: %+v), each reached within the 5 s misfire threshold", st.Skips, st.LastSkip)
		}
		if len(r.ticks) != 6 {
			t.Fatalf("ran ticks %v, want the six of 1 s to 6 s", r.ticks)
		}
	})
}

// The shortest ttl WithTTL takes, 3 ms (renewed every millisecond, the
// least lock.MinRenewInterval allows), holds a run's slot. WithTTL took
// 1 ms, and each run then failed before its function.
func TestShortestTTLRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var r record
		if err := s.Add(timers.Every("short-ttl", time.Second, func(ctx context.Context) error {
			time.Sleep(10 * time.Millisecond) // renewed meanwhile
			return r.fn(ctx)
		}, timers.WithTTL(3*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 3500*time.Millisecond)
		if st := s.Status()[0]; len(r.ticks) != 3 || st.Failures != 0 {
			t.Fatalf("ran %d of 3 ticks; status %+v", len(r.ticks), st)
		}
	})
}

func TestRetryWithinATick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var calls []time.Time
		fn := func(ctx context.Context) error {
			calls = append(calls, time.Now())
			if len(calls) < 3 {
				return errors.New("flaky")
			}
			return nil
		}
		if err := s.Add(timers.Every("retry", time.Hour, fn, timers.WithRetries(3, 100*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, time.Hour+time.Second)
		tick := epoch.Add(time.Hour)
		want := []time.Time{tick, tick.Add(100 * time.Millisecond), tick.Add(300 * time.Millisecond)}
		if len(calls) != 3 || !calls[0].Equal(want[0]) || !calls[1].Equal(want[1]) || !calls[2].Equal(want[2]) {
			t.Fatalf("calls at %v, want %v", calls, want)
		}
		st := s.Status()[0]
		if st.Runs != 1 || st.Failures != 0 || st.LastRun.Outcome != "ok" {
			t.Fatalf("status %+v", st)
		}
	})
}

func TestMaxRunTimeCancelsTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var ended time.Time
		fn := func(ctx context.Context) error {
			<-ctx.Done()
			ended = time.Now()
			return context.Cause(ctx)
		}
		if err := s.Add(timers.Every("slow", time.Hour, fn, timers.WithMaxRunTime(3*time.Second))); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, time.Hour+10*time.Second)
		if want := epoch.Add(time.Hour + 3*time.Second); !ended.Equal(want) {
			t.Fatalf("run ended at %v, want %v", ended, want)
		}
		if st := s.Status()[0]; st.LastRun.Outcome != "cancelled" || st.Failures != 1 {
			t.Fatalf("status %+v", st)
		}
	})
}

// Runs of 2.5 intervals with WithMaxConcurrency(2): ticks 0 and 1 run, tick 2
// finds both slots busy and is skipped, tick 3 runs on the slot tick 0
// freed at 2.5, and so on.
func TestMaxConcurrencySkipsBusyTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var running, peak atomic.Int32
		fn := func(ctx context.Context) error {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(2500 * time.Millisecond)
			running.Add(-1)
			return nil
		}
		if err := s.Add(timers.Every("long", time.Second, fn, timers.WithMaxConcurrency(2))); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 12*time.Second+time.Millisecond)
		st := s.Status()[0]
		if peak.Load() != 2 {
			t.Fatalf("peak %d runs at once, want 2", peak.Load())
		}
		// Ticks 1..12: runs at 1,2,4,5,7,8,10,11 and skips at 3,6,9,12.
		if st.Runs+int64(running.Load()) < 8 || st.Skips != 4 || st.LastSkip.Reason != "busy" {
			t.Fatalf("status %+v (still running %d): want 8 runs and 4 busy skips", st, running.Load())
		}
	})
}

// Three hosts on one backend with clocks −200 ms, 0 and +200 ms off:
// every tick runs exactly once.
func TestOncePerTickAcrossSkewedHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		table := testkit.Must(memlock.New())
		var count tickCount
		fn := count.fn
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(t.Context(), 30500*time.Millisecond)
		defer cancel()
		var schedulers []*timers.Scheduler
		for i, skew := range []time.Duration{-200 * time.Millisecond, 0, 200 * time.Millisecond} {
			s := testkit.Must(timers.New(testkit.Must(table.Share()), timers.WithClock(func() time.Time { return time.Now().Add(skew) })))
			if err := s.Add(timers.Every("skewed", time.Second, fn)); err != nil {
				t.Fatal(err)
			}
			schedulers = append(schedulers, s)
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 700 * time.Millisecond) // started at different moments
				_ = s.Run(ctx)
			})
		}
		wg.Wait()
		count.onceEach(t, 29)
		var elsewhere int64
		for _, s := range schedulers {
			elsewhere += s.Status()[0].Elsewhere
		}
		if elsewhere == 0 {
			t.Fatal("no host ever found a tick claimed: the hosts did not compete")
		}
	})
}

func TestShutdownWaitsThenCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := testkit.Must(memlock.New())
		s := testkit.Must(timers.New(l, timers.WithShutdownTimeout(5*time.Second)))
		var finished, cancelled atomic.Bool
		if err := s.Add(timers.Every("short", time.Minute, func(ctx context.Context) error {
			time.Sleep(2 * time.Second)
			finished.Store(true)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		if err := s.Add(timers.Every("stubborn", time.Minute, func(ctx context.Context) error {
			<-ctx.Done()
			cancelled.Store(true)
			return ctx.Err()
		})); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute+time.Second)
		defer cancel()
		_ = s.Run(ctx)
		if got := time.Since(epoch); got != time.Minute+6*time.Second {
			t.Fatalf("Run returned after %v, want the shutdown timeout of 5 s after ctx ended (1m6s)", got)
		}
		if !finished.Load() || !cancelled.Load() {
			t.Fatalf("finished %v cancelled %v", finished.Load(), cancelled.Load())
		}
		if grants, _ := l.List(t.Context(), "sem/"); len(grants) > 1 { // only the size declarations may remain
			for _, g := range grants {
				if g.Key != "sem/{timer/short}/size/1" && g.Key != "sem/{timer/stubborn}/size/1" {
					t.Fatalf("grant left after Run: %+v", g)
				}
			}
		}
	})
}

func TestBadInput(t *testing.T) {
	s := testkit.Must(timers.New(testkit.Must(memlock.New())))
	fn := func(context.Context) error { return nil }
	if err := s.Add(timers.Every("dup", time.Second, fn)); err != nil {
		t.Fatal(err)
	}
	for name, tm := range map[string]*timers.Timer{
		"zero interval":          timers.Every("a", 0, fn),
		"negative interval":      timers.Every("b", -time.Second, fn),
		"invalid cron":           timers.Cron("c", "61 * * * *", fn),
		"invalid @every":         timers.Cron("c2", "@every soon", fn),
		"duplicate":              timers.Every("dup", time.Second, fn),
		"WithMaxConcurrency 0":   timers.Every("d", time.Second, fn, timers.WithMaxConcurrency(0)),
		"nil fn":                 timers.Every("e", time.Second, nil),
		"braces":                 timers.Every("f{x}", time.Second, fn),
		"WithLocation(Every)":    timers.Every("g", time.Second, fn, timers.WithLocation(time.UTC)),
		"negative retries":       timers.Every("h", time.Second, fn, timers.WithRetries(-1, 0)),
		"zero WithMaxRunTime":    timers.Every("i", time.Second, fn, timers.WithMaxRunTime(0)),
		"nil option":             timers.Every("j", time.Second, fn, nil),
		"WithRunWhenUnavailable": timers.Every("k", time.Second, fn, timers.WithRunWhenUnavailable(0)),
		"WithRunsPerTick 0":      timers.Every("l", time.Second, fn, timers.WithRunsPerTick(0)),
		"WithRunsPerTick 1025":   timers.Every("m", time.Second, fn, timers.WithRunsPerTick(1025)),
		"slots below runs":       timers.Every("n", time.Second, fn, timers.WithRunsPerTick(3), timers.WithMaxConcurrency(2)),
	} {
		if err := s.Add(tm); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := s.Add(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("nil timer: %v", err)
	}
	// New reports a nil Lock and its own invalid options itself (they
	// used to be reported by Add and Run).
	l := testkit.Must(memlock.New())
	for name, c := range map[string]struct {
		l    lock.Lock
		opts []timers.SchedulerOption
	}{
		"nil Lock":               {nil, nil},
		"nil option":             {l, []timers.SchedulerOption{nil}},
		"nil clock":              {l, []timers.SchedulerOption{timers.WithClock(nil)}},
		"zero shutdown timeout":  {l, []timers.SchedulerOption{timers.WithShutdownTimeout(0)}},
		"shutdown timeout > Max": {l, []timers.SchedulerOption{timers.WithShutdownTimeout(lock.MaxTTL + 1)}},
		"owner with a newline":   {l, []timers.SchedulerOption{timers.WithCommon(lock.Common{Owner: "a\nb"})}},
	} {
		s, err := timers.New(c.l, c.opts...)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "timers: invalid argument: ") || s != nil {
			t.Errorf("New, %s: %v, %v, want a timers: ErrInvalidArgument", name, s, err)
		}
	}
}

// The scheduler's owner (WithCommon's Owner, else the Lock's) is the
// Runner that Status reports; two WithCommon options compose.
// The runner in Status is the Lock's owner, which the claims and slots
// that Observe shows are stored with; a configured Owner that differs from
// it is refused (it could be reported, never made true); with a Lock that
// states no owner, the configured one is the runner.
func TestSchedulerOwner(t *testing.T) {
	for _, c := range []struct {
		hide bool // the Lock states no owner
		opts []timers.SchedulerOption
		want string
	}{
		{false, nil, "lock-owner"},
		{false, []timers.SchedulerOption{timers.WithCommon(lock.Common{Owner: "lock-owner"})}, "lock-owner"},
		{true, []timers.SchedulerOption{timers.WithCommon(lock.Common{Owner: "scheduler-owner"}),
			timers.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)})}, "scheduler-owner"},
	} {
		synctest.Test(t, func(t *testing.T) {
			time.Sleep(time.Until(epoch))
			var l lock.Lock = testkit.Must(memlock.New(memlock.WithCommon(lock.Common{Owner: "lock-owner"})))
			if c.hide {
				l = struct{ lock.Lock }{l}
			}
			s := testkit.Must(timers.New(l, c.opts...))
			var r record
			if err := s.Add(timers.Every("owned", time.Second, r.fn)); err != nil {
				t.Fatal(err)
			}
			runFor(t, s, 1500*time.Millisecond)
			if st := s.Status()[0]; st.Runs != 1 || st.LastRun.Runner != c.want {
				t.Fatalf("status %+v: want one run by %q", st, c.want)
			}
		})
	}
	l := testkit.Must(memlock.New(memlock.WithCommon(lock.Common{Owner: "lock-owner"})))
	_, err := timers.New(l, timers.WithCommon(lock.Common{Owner: "scheduler-owner"}))
	if !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "timers: ") {
		t.Fatalf("an Owner that is not the Lock's: %v, want it refused by timers", err)
	}
}

// tickCount counts the runs of each tick.
type tickCount struct {
	mu sync.Mutex
	n  map[time.Time]int
}

func (c *tickCount) fn(ctx context.Context) error {
	tick, _ := timers.TickFrom(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[time.Time]int{}
	}
	c.n[tick.At]++
	return nil
}

// onceEach fails unless at least min ticks ran, each once.
func (c *tickCount) onceEach(t *testing.T, min int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.n) < min {
		t.Fatalf("%d ticks ran, want at least %d", len(c.n), min)
	}
	for tick, n := range c.n {
		if n != 1 {
			t.Fatalf("tick %v ran %d times", tick, n)
		}
	}
}

// slowLock delivers its TryAcquire requests late, as a network that holds
// packets (or a client that retries) would.
type slowLock struct {
	lock.Lock
	delay time.Duration
}

func (s slowLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	time.Sleep(s.delay)
	return s.Lock.TryAcquire(ctx, key, ttl)
}

// A claim delivered after the tick's earlier claim expired is granted
// again; the host must not run the tick a second time (chaos found it).
func TestLateClaimDoesNotRunTheTickAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		table := testkit.Must(memlock.New())
		var count tickCount
		fn := count.fn
		ctx, cancel := context.WithTimeout(t.Context(), 10500*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		var schedulers []*timers.Scheduler
		// The claim lives interval + threshold = 1.5 s: the slow host's
		// requests arrive 2 s late.
		for _, l := range []lock.Lock{testkit.Must(table.Share()), slowLock{testkit.Must(table.Share()), 2 * time.Second}} {
			s := testkit.Must(timers.New(l))
			if err := s.Add(timers.Every("late", time.Second, fn)); err != nil {
				t.Fatal(err)
			}
			schedulers = append(schedulers, s)
			wg.Go(func() { _ = s.Run(ctx) })
		}
		wg.Wait()
		count.onceEach(t, 9)
		if st := schedulers[1].Status()[0]; st.Runs != 0 || st.Skips < 3 {
			t.Fatalf("the slow host's status: %+v; want its late claims skipped", st)
		}
	})
}

// 2030-11-03 is the fall-back day in New York: 01:00 to 01:59 happens
// twice, first in EDT, then in EST. robfig/cron's parser fires a time of
// day in that hour in both occurrences (its own spec test expects 01:30
// EST after 01:30 EDT), and Cron follows it: two ticks an hour apart, each
// run once.
func TestCronAcrossFallBack(t *testing.T) {
	ny := newYork(t)
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Date(2030, 11, 1, 12, 0, 0, 0, ny)))
		table := testkit.Must(memlock.New())
		var count tickCount
		ctx, cancel := context.WithTimeout(t.Context(), 3*24*time.Hour)
		defer cancel()
		var wg sync.WaitGroup
		for range 2 { // two hosts: each tick once between them
			s := testkit.Must(timers.New(testkit.Must(table.Share())))
			if err := s.Add(timers.Cron("fall-back", "30 1 * * *", count.fn, timers.WithLocation(ny))); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { _ = s.Run(ctx) })
		}
		wg.Wait()
		count.onceEach(t, 4)
		var got []string
		for tk := range count.n {
			got = append(got, tk.In(ny).Format("2006-01-02 15:04 MST"))
		}
		sort.Strings(got)
		want := []string{"2030-11-02 01:30 EDT", "2030-11-03 01:30 EDT", "2030-11-03 01:30 EST", "2030-11-04 01:30 EST"}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Fatalf("ticks %v, want %v", got, want)
		}
	})
}

// WithRetries's retries stop at WithMaxRunTime: with a backoff of 1 s the
// attempts go at 0, 1 s and 3 s; the next would be at 7 s, past the 3.5 s
// deadline, so the run ends at 3.5 s with fn's error and the deadline.
func TestRetriesStopAtMaxRunTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var calls []time.Duration
		boom := errors.New("boom")
		fn := func(ctx context.Context) error {
			calls = append(calls, time.Since(epoch.Add(time.Hour)))
			return boom
		}
		if err := s.Add(timers.Every("retry-deadline", time.Hour, fn, timers.WithRetries(10, time.Second), timers.WithMaxRunTime(3500*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, time.Hour+10*time.Second)
		if want := []time.Duration{0, time.Second, 3 * time.Second}; !slices.Equal(calls, want) {
			t.Fatalf("attempts at %v after the tick, want %v", calls, want)
		}
		st := s.Status()[0]
		if st.Runs != 1 || st.Failures != 1 || st.LastRun.Outcome != "cancelled" || st.LastRun.Duration != 3500*time.Millisecond ||
			!errors.Is(st.LastRun.Err, boom) || !errors.Is(st.LastRun.Err, context.DeadlineExceeded) {
			t.Fatalf("status %+v: want one run cut off at 3.5 s with fn's error and the deadline", st)
		}
	})
}
