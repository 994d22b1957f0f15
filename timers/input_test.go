package timers_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

func nop(context.Context) error { return nil }

// logCount counts log records by message and cancels a context after max
// records of skipped ticks, so that a scheduler that spins ends its Run.
type logCount struct {
	mu     sync.Mutex
	n      map[string]int
	levels map[string]slog.Level
	max    int
	cancel context.CancelFunc
}

func newLogCount(max int, cancel context.CancelFunc) *logCount {
	return &logCount{n: map[string]int{}, levels: map[string]slog.Level{}, max: max, cancel: cancel}
}

func (c *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCount) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *logCount) WithGroup(string) slog.Handler            { return c }
func (c *logCount) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[r.Message]++
	c.levels[r.Message] = r.Level
	if r.Message == "leasehold: timer tick skipped" && c.n[r.Message] >= c.max {
		c.cancel()
	}
	return nil
}

func (c *logCount) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}

// Schedules without a tick to come, and intervals below the claim key's
// millisecond, are refused by Add (issue 14: "0 0 30 2 *" spun a core,
// "@every 1ns" logged a million skips a second, Every(100µs) ticks shared
// claims).
func TestAddRefusesSchedulesThatCannotTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		// Run ends half an interval after a tick, never at one: a tick due
		// at the very instant Run's context ends may be skipped for it
		// (failed once in CI: 1 tick skipped).
		ctx, cancel := context.WithTimeout(t.Context(), time.Second+timers.MinInterval/2)
		defer cancel()
		logs := newLogCount(100, cancel)
		s := testkit.Must(timers.New(testkit.Must(memlock.New()), timers.WithCommon(lock.Common{Logger: slog.New(logs)})))
		for name, tm := range map[string]*timers.Timer{
			"30 February":          timers.Cron("feb30", "0 0 30 2 *", nop),
			"31 April":             timers.Cron("apr31", "0 0 31 4 *", nop),
			"@every 1ns":           timers.Cron("every1ns", "@every 1ns", nop),
			"@every 999µs":         timers.Cron("every999us", "@every 999us", nop),
			"Every(100µs)":         timers.Every("every100us", 100*time.Microsecond, nop),
			"Every(1ns)":           timers.Every("every1ns-b", time.Nanosecond, nop),
			"@every with TZ":       timers.Cron("tz-every", "CRON_TZ=UTC @every 1h", nop),
			"@every with TZ (sub)": timers.Cron("tz-every-2", "TZ=Europe/Berlin @every 5s", nop),
		} {
			if err := s.Add(tm); !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("%s: Add returned %v, want ErrInvalidArgument", name, err)
			}
		}
		if err := s.Add(timers.Every("min", timers.MinInterval, nop)); err != nil {
			t.Fatalf("Every(MinInterval): %v", err)
		}
		if err := s.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if n := logs.count("leasehold: timer tick skipped"); n != 0 {
			t.Fatalf("%d ticks skipped", n)
		}
		if st := s.Status(); len(st) != 1 || st[0].Runs < 999 || st[0].Elsewhere != 0 {
			t.Fatalf("status %+v: want the MinInterval timer alone, 1,000 runs, none elsewhere", st)
		}
	})
}

// Ticks at MinInterval and at 1.5 ms each get a claim of their own: one
// host runs every tick, and finds none claimed elsewhere.
func TestTicksAtMinIntervalHaveTheirOwnClaims(t *testing.T) {
	for _, iv := range []time.Duration{timers.MinInterval, 1500 * time.Microsecond} {
		synctest.Test(t, func(t *testing.T) {
			time.Sleep(time.Until(epoch))
			s := testkit.Must(timers.New(testkit.Must(memlock.New())))
			var count tickCount
			if err := s.Add(timers.Every("fast", iv, count.fn)); err != nil {
				t.Fatal(err)
			}
			runFor(t, s, 300*iv+iv/2)
			count.onceEach(t, 300)
			if st := s.Status()[0]; st.Elsewhere != 0 || st.Skips != 0 || st.Runs != 300 {
				t.Fatalf("interval %v: status %+v, want 300 runs", iv, st)
			}
		})
	}
}

// A cron spec that fires on 29 February has ticks up to eight years apart
// (2096, then 2104): the parser looks five years ahead, Cron looks further.
func TestCronAcrossALeapYearGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC)
		offset := time.Until(start)
		s := testkit.Must(timers.New(testkit.Must(memlock.New()), timers.WithClock(func() time.Time { return time.Now().Add(offset) })))
		if err := s.Add(timers.Cron("leap", "0 0 29 2 *", nop)); err != nil {
			t.Fatal(err)
		}
		if next, want := s.Status()[0].Next, time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC); !next.Equal(want) {
			t.Fatalf("next tick %v, want %v", next, want)
		}
	})
}

// A tick whose claim would outlive the backend's maximum ttl (29 February,
// four years to the next) claims for the maximum instead of being refused.
func TestClaimTTLWithinTheBackendsLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Date(2028, 2, 28, 0, 0, 0, 0, time.UTC)))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var r record
		if err := s.Add(timers.Cron("leap", "0 0 29 2 *", r.fn)); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 2*24*time.Hour)
		if st := s.Status()[0]; st.Runs != 1 || st.Skips != 0 {
			t.Fatalf("status %+v: want the 29 February tick run", st)
		}
	})
}

// A backend's minimum ttl: claims of a 1 ms timer are rounded up to it
// (they were refused, so every tick was skipped, on Redis and PostgreSQL
// for intervals below 7 ms).
func TestClaimTTLAtLeastTheBackendsMinimum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(limited{testkit.Must(memlock.New()), lock.Limits{MinTTL: 10 * time.Millisecond, MaxTTL: time.Hour}}))
		var count tickCount
		if err := s.Add(timers.Every("fast", time.Millisecond, count.fn)); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 100*time.Millisecond+time.Microsecond)
		count.onceEach(t, 100)
		if st := s.Status()[0]; st.Skips != 0 {
			t.Fatalf("status %+v", st)
		}
	})
}

// A schedule that runs out of ticks while it runs (here the last hour a
// time.Time of Unix nanoseconds holds, in 2262) stops the timer with an
// error; it used to wrap to 1677 and spin, logging skipped ticks.
func TestLoopStopsWhenTheScheduleRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		last := time.Unix(0, math.MaxInt64/int64(time.Hour)*int64(time.Hour))
		offset := time.Until(last.Add(-90 * time.Minute))
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Hour)
		defer cancel()
		logs := newLogCount(1000, cancel)
		s := testkit.Must(timers.New(testkit.Must(memlock.New()), timers.WithCommon(lock.Common{Logger: slog.New(logs)}),
			timers.WithClock(func() time.Time { return time.Now().Add(offset) })))
		var r record
		if err := s.Add(timers.Every("end-of-time", time.Hour, r.fn)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := s.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if n := logs.count("leasehold: timer tick skipped"); n != 0 {
			t.Fatalf("%d ticks skipped: the loop spun", n)
		}
		st := s.Status()[0]
		if st.Runs != 1 || st.Stopped == nil || !st.Next.IsZero() {
			t.Fatalf("status %+v: want one run (the tick before the last), then stopped", st)
		}
		if logs.count("leasehold: timer stopped: its schedule has no next tick") != 1 {
			t.Fatalf("no error logged: %v", logs.n)
		}
		if took := time.Since(start); took != 3*time.Hour {
			t.Fatalf("Run returned after %v, want at its context's end", took)
		}
	})
}

// limited is a memlock with other limits, which it enforces.
type limited struct {
	*memlock.Lock
	lim lock.Limits
}

func (l limited) Limits() lock.Limits { return l.lim }

func (l limited) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, l.lim); err != nil {
		return nil, err
	}
	return l.Lock.TryAcquire(ctx, key, ttl)
}

func (l limited) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.ValidateKeys(ctx, keys, ttl, l.lim); err != nil {
		return nil, err
	}
	return l.Lock.TryAcquireAny(ctx, keys, ttl)
}

// Every duration option is bounded; Add checks the options against the
// backend's limits; the error names the option.
func TestDurationOptionsWithinLimits(t *testing.T) {
	l := limited{testkit.Must(memlock.New()), lock.Limits{MinTTL: 10 * time.Millisecond, MaxTTL: time.Hour}}
	s := testkit.Must(timers.New(l))
	for _, c := range []struct {
		name   string
		opt    timers.Option
		target error
	}{
		{"WithMaxRunTime", timers.WithMaxRunTime(math.MaxInt64), lock.ErrInvalidArgument},
		{"WithMaxRunTime", timers.WithMaxRunTime(lock.MaxTTL + 1), lock.ErrInvalidArgument},
		{"WithRetries", timers.WithRetries(1, math.MaxInt64), lock.ErrInvalidArgument},
		{"WithRetries", timers.WithRetries(timers.MaxRetries+1, 0), lock.ErrInvalidArgument},
		{"WithRetries", timers.WithRetries(math.MaxInt, time.Second), lock.ErrInvalidArgument},
		{"WithMisfireThreshold", timers.WithMisfireThreshold(math.MaxInt64), lock.ErrInvalidArgument},
		{"WithMisfireThreshold", timers.WithMisfireThreshold(31 * time.Minute), lock.ErrInvalidArgument}, // above half the backend's 1 h
		{"WithTTL", timers.WithTTL(math.MaxInt64), lock.ErrInvalidTTL},
		{"WithTTL", timers.WithTTL(time.Nanosecond), lock.ErrInvalidTTL},
		{"WithTTL", timers.WithTTL(2 * time.Hour), lock.ErrInvalidTTL},        // above the backend's maximum
		{"WithTTL", timers.WithTTL(5 * time.Millisecond), lock.ErrInvalidTTL}, // below the backend's minimum
	} {
		err := s.Add(timers.Every("opts", time.Second, nop, c.opt))
		if !errors.Is(err, c.target) || !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s: %v, want %v naming the option", c.name, err, c.target)
		}
	}
	for _, opt := range []timers.Option{timers.WithMaxRunTime(lock.MaxTTL), timers.WithRetries(timers.MaxRetries, lock.MaxTTL),
		timers.WithMisfireThreshold(30 * time.Minute), timers.WithTTL(time.Hour), timers.WithTTL(10 * time.Millisecond)} {
		if err := testkit.Must(timers.New(l)).Add(timers.Every("opts", time.Second, nop, opt)); err != nil {
			t.Errorf("an option at its limit: %v", err)
		}
	}
	// A lease renewed every third of its ttl needs 3 ms at least, whatever
	// the backend allows (memlock: 1 ms); WithTTL(2ms) was taken, and then
	// every run failed before its function, its lease refused.
	if err := testkit.Must(timers.New(testkit.Must(memlock.New()))).Add(timers.Every("opts", time.Second, nop, timers.WithTTL(2*time.Millisecond))); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("WithTTL(2ms): %v, want ErrInvalidTTL", err)
	}
	if s, err := timers.New(l, timers.WithShutdownTimeout(math.MaxInt64)); !errors.Is(err, lock.ErrInvalidArgument) || s != nil {
		t.Errorf("WithShutdownTimeout(MaxInt64): %v, %v, want ErrInvalidArgument from New", s, err)
	}
}

// One rule for timer names, checked by Every and Cron and again by Add:
// backendkit.CheckName's, at most MaxNameLen bytes, so that the semaphore name
// ("timer/<name>") and every key derived from it are accepted downstream.
// Names of 195 to 200 bytes failed with an error about a "semaphore name".
func TestTimerNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := testkit.Must(memlock.New())
		s := testkit.Must(timers.New(l))
		names := []string{strings.Repeat("a", 195), strings.Repeat("b", 200), strings.Repeat("é", timers.MaxNameLen/2)}
		for _, n := range names {
			if err := s.Add(timers.Every(n, time.Minute, nop, timers.WithMaxConcurrency(1024))); err != nil {
				t.Fatalf("a name of %d bytes: %v", len(n), err)
			}
		}
		if err := s.Add(timers.Cron(strings.Repeat("c", timers.MaxNameLen), "* * * * *", nop)); err != nil {
			t.Fatalf("a cron name of MaxNameLen bytes: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute+time.Second)
		defer cancel()
		ran := make(chan struct{})
		// Hold the run so that its slot is held while its keys are listed.
		// It ticks at 50 s: the size declarations that Run made at its
		// start last a minute, and the tick must not race with their
		// renewal at 60 s.
		longest := strings.Repeat("d", timers.MaxNameLen)
		if err := s.Add(timers.Every(longest, 50*time.Second, func(ctx context.Context) error {
			grants, err := l.List(ctx, "")
			if err != nil {
				return err
			}
			own := 0
			for _, g := range grants {
				if err := lock.CheckKey(g.Key); err != nil {
					t.Errorf("key %.80q: %v", g.Key, err)
				}
				if strings.Contains(g.Key, longest) {
					own++
				}
			}
			// Only this timer's keys are sure to exist now (the other
			// timers of the tick may not have claimed yet): its tick claim,
			// its slot and its semaphore's size declaration.
			if own != 3 {
				t.Errorf("%d grants of the longest name, want its claim, slot and size declaration", own)
			}
			close(ran)
			return nil
		}, timers.WithMaxConcurrency(1024))); err != nil {
			t.Fatal(err)
		}
		if err := s.Run(ctx); err != nil {
			t.Fatal(err)
		}
		<-ran
		for _, st := range s.Status() {
			if st.Runs != 1 || st.Skips != 0 {
				t.Errorf("timer of %d bytes: %+v", len(st.Name), st)
			}
		}
	})
	s := testkit.Must(timers.New(testkit.Must(memlock.New())))
	for what, n := range map[string]string{
		"empty":        "",
		"too long":     strings.Repeat("x", timers.MaxNameLen+1),
		"lock's limit": strings.Repeat("x", lock.MaxNameLen),
		"NUL":          "a\x00b",
		"newline":      "a\nb",
		"escape":       "\x1b[31m",
		"invalid UTF8": "a\xffb",
		"brace":        "a{b}",
	} {
		for kind, tm := range map[string]*timers.Timer{"Every": timers.Every(n, time.Second, nop), "Cron": timers.Cron(n, "@hourly", nop)} {
			err := s.Add(tm)
			if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "timer name") || strings.Contains(err.Error(), "semaphore") {
				t.Errorf("%s, %s: %v, want ErrInvalidArgument about the timer name", kind, what, err)
			}
		}
	}
	// Observe's prefix follows the same rule ("" lists every timer).
	for _, p := range []string{"a\x00", "a{", strings.Repeat("x", timers.MaxNameLen+1)} {
		if _, err := timers.Observe(t.Context(), testkit.Must(memlock.New()), p); !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "timer name prefix") {
			t.Errorf("Observe(%.20q): %v", p, err)
		}
	}
	if _, err := timers.Observe(t.Context(), testkit.Must(memlock.New()), ""); err != nil {
		t.Errorf(`Observe(""): %v`, err)
	}
}
