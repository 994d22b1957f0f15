package timers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

// outage is a Lock whose backend cannot be reached (lock.ErrUnavailable,
// as a driver's connection error is reported) from down to up, bubble
// time. It hides memlock's MultiLock, so the semaphore's slots go through
// TryAcquire too.
type outage struct {
	lock.Lock
	down, up time.Time
}

func (o outage) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if now := time.Now(); !now.Before(o.down) && now.Before(o.up) {
		return nil, backendkit.Unavailable("acquire", errors.New("dial tcp 127.0.0.1:6379: connection refused"))
	}
	return o.Lock.TryAcquire(ctx, key, ttl)
}

// runs records the ticks a timer ran, whether each ran under the per-host
// cap, and the peak of such runs at once.
type runs struct {
	mu          sync.Mutex
	ticks       []timers.Tick
	local, peak int
}

func (r *runs) start(tick timers.Tick) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ticks = append(r.ticks, tick)
	if tick.Local {
		r.local++
		r.peak = max(r.peak, r.local)
	}
}

func (r *runs) end(tick timers.Tick) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tick.Local {
		r.local--
	}
}

// seconds lists the ticks as seconds after epoch, with an L for a run
// under the per-host cap.
func (r *runs) seconds() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, tk := range r.ticks {
		s := tk.At.Sub(epoch).String()
		if tk.Local {
			s += "L"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// overOutage waits for epoch and returns a scheduler over memlock whose
// backend is away from 3.5 s to 7.7 s after epoch, logging into logs.
func overOutage(logs *bytes.Buffer) *timers.Scheduler {
	time.Sleep(time.Until(epoch))
	l := outage{Lock: testkit.Must(memlock.New()), down: epoch.Add(3500 * time.Millisecond), up: epoch.Add(7700 * time.Millisecond)}
	return testkit.Must(timers.New(l, timers.WithCommon(lock.Common{Logger: slog.New(slog.NewTextHandler(logs, nil))})))
}

// The backend is unreachable from 3.5 s to 7.7 s; the timer ticks every
// second, from 1 s to 10 s.
func TestBackendUnreachable(t *testing.T) {
	// Without WithRunWhenUnavailable (the safe default), ticks 4 to 7 are
	// skipped (reason unavailable) and counted; from tick 8 on the timer
	// runs as before.
	t.Run("skip", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var logs bytes.Buffer
			s := overOutage(&logs)
			var r runs
			if err := s.Add(timers.Every("outage", time.Second, func(ctx context.Context) error {
				tick, _ := timers.TickFrom(ctx)
				r.start(tick)
				r.end(tick)
				return nil
			})); err != nil {
				t.Fatal(err)
			}
			runFor(t, s, 10500*time.Millisecond)
			if got, want := r.seconds(), "1s 2s 3s 8s 9s 10s"; got != want {
				t.Fatalf("ran ticks %s, want %s", got, want)
			}
			st := s.Status()[0]
			if st.Runs != 6 || st.Skips != 4 || st.LastSkip.Reason != "unavailable" || !st.LastSkip.Tick.Equal(epoch.Add(7*time.Second)) {
				t.Fatalf("status %+v: want 6 runs and 4 skips, the last of tick 7 s for reason unavailable", st)
			}
			if n := strings.Count(logs.String(), `level=WARN msg="leasehold: timer tick skipped" timer=outage`); n != 4 {
				t.Fatalf("%d skip warnings, want 4:\n%s", n, logs.String())
			}
			if n := strings.Count(logs.String(), "reason=unavailable"); n != 4 {
				t.Fatalf("%d skips logged with reason unavailable, want 4:\n%s", n, logs.String())
			}
			if n := strings.Count(logs.String(), "backend reachable again"); n != 1 {
				t.Fatalf("%d notes that the backend answers again, want 1:\n%s", n, logs.String())
			}
		})
	})

	// With WithRunWhenUnavailable(2) and runs of 2.5 s while the backend is
	// away: ticks 4 and 5 run on this host, tick 6 finds the per-host cap
	// reached (skipped, busy), tick 7 runs on the place tick 4 freed; each
	// such run says at Warn that the cluster-wide guarantees are suspended.
	// Tick 8 finds the backend again and runs as usual, with a claim and a
	// slot.
	t.Run("fallback", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var logs bytes.Buffer
			s := overOutage(&logs)
			var r runs
			var normal atomic.Int32
			if err := s.Add(timers.Every("outage", time.Second, func(ctx context.Context) error {
				tick, _ := timers.TickFrom(ctx)
				r.start(tick)
				defer r.end(tick)
				if tick.Local {
					time.Sleep(2500 * time.Millisecond)
				} else if _, ok := lock.TokenFrom(ctx); ok && tick.Claim > 0 && tick.Slot == 0 {
					normal.Add(1)
				}
				return nil
			}, timers.WithRunWhenUnavailable(2))); err != nil {
				t.Fatal(err)
			}
			runFor(t, s, 10500*time.Millisecond)
			if got, want := r.seconds(), "1s 2s 3s 4sL 5sL 7sL 8s 9s 10s"; got != want {
				t.Fatalf("ran ticks %s, want %s", got, want)
			}
			if r.peak != 2 {
				t.Fatalf("at most %d runs at once under the per-host cap of 2, want 2", r.peak)
			}
			if n := normal.Load(); n != 6 {
				t.Fatalf("%d runs with a claim, a slot and a fencing token, want 6 (1 s to 3 s, 8 s to 10 s)", n)
			}
			st := s.Status()[0]
			if st.Runs != 9 || st.Skips != 1 || st.LastSkip.Reason != "busy" || !st.LastSkip.Tick.Equal(epoch.Add(6*time.Second)) || st.LastRun.Local {
				t.Fatalf("status %+v: want 9 runs, tick 6 s skipped as busy, the last run cluster-wide", st)
			}
			suspended := `level=WARN msg="leasehold: backend unreachable, running the tick under the per-host cap: the cluster-wide once-per-tick and concurrency guarantees are suspended" timer=outage`
			if n := strings.Count(logs.String(), suspended); n != 3 {
				t.Fatalf("%d warnings that the guarantees are suspended, want 3 (ticks 4, 5, 7):\n%s", n, logs.String())
			}
			if n := strings.Count(logs.String(), "level=WARN msg=\"leasehold: backend reachable again"); n != 1 {
				t.Fatalf("%d notes that the backend answers again, want 1:\n%s", n, logs.String())
			}
		})
	})
}

// stalling is a Lock whose requests hang until their context ends from
// down to up, bubble time (a pool with no free connection does that), and
// then fail as a driver reports it.
type stalling outage

func (s stalling) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if now := time.Now(); !now.Before(s.down) && now.Before(s.up) {
		<-ctx.Done()
		return nil, backendkit.Unavailable("acquire: getting a connection", ctx.Err())
	}
	return s.Lock.TryAcquire(ctx, key, ttl)
}

// A claim that hangs costs its own tick only: the attempt ends by the next
// tick, which runs on time.
func TestStalledClaimCostsOneTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := stalling{Lock: testkit.Must(memlock.New()), down: epoch.Add(2500 * time.Millisecond), up: epoch.Add(3700 * time.Millisecond)}
		s := testkit.Must(timers.New(l, timers.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)})))
		var r record
		if err := s.Add(timers.Every("stall", time.Second, r.fn)); err != nil {
			t.Fatal(err)
		}
		runFor(t, s, 5500*time.Millisecond)
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second}
		if len(r.ticks) != len(want) {
			t.Fatalf("ran ticks %v, want %v after epoch", r.ticks, want)
		}
		for i, d := range want {
			if !r.ticks[i].Equal(epoch.Add(d)) || !r.at[i].Equal(epoch.Add(d)) {
				t.Fatalf("run %d: tick %v at %v, want %v after epoch, on time", i, r.ticks[i], r.at[i], d)
			}
		}
		if st := s.Status()[0]; st.Skips != 1 || st.LastSkip.Reason != "unavailable" || !st.LastSkip.Tick.Equal(epoch.Add(3*time.Second)) {
			t.Fatalf("status %+v: want tick 3 s skipped as unavailable", st)
		}
	})
}
