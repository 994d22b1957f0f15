package timers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// slotCounting is memlock that records every TryAcquireAnyEach call (the
// number of requests in it) and the single slot attempts, counts the slot
// grants released through ReleaseEach, and fails the slot requests of the
// timers named in fail with their error.
type slotCounting struct {
	*memlock.Lock
	fail map[string]error // by semaphore name, "timer/<name>"

	callSizes
	single   atomic.Int64
	released atomic.Int64
}

func (c *slotCounting) TryAcquireAnyEach(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
	c.add(len(reqs))
	out := c.Lock.TryAcquireAnyEach(ctx, reqs)
	for i, r := range reqs {
		for name, err := range c.fail {
			if strings.HasPrefix(r.Keys[0], "sem/{"+name+"}") {
				if out[i].Handle != nil {
					_ = out[i].Handle.Release(ctx)
				}
				out[i] = lock.AnyResult{Err: err}
			}
		}
	}
	return out
}

func (c *slotCounting) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	c.single.Add(1)
	return c.Lock.TryAcquireAny(ctx, keys, ttl)
}

func (c *slotCounting) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	for _, h := range hs {
		if strings.HasPrefix(h.Key(), "sem/{timer/") {
			c.released.Add(1)
		}
	}
	return c.Lock.ReleaseEach(ctx, hs)
}

// 100 timers due every second and 100 due every hour, for 5.5 s: the
// slots of the 100 ticks claimed at each instant are taken in one
// TryAcquireAnyEach call (semaphore.TryAcquireEach), not a TryAcquireAny
// each, and every run's slot is released through the Keeper that kept it,
// in lock.ReleaseEach calls. Every tick runs once.
func TestSlotsOfOneInstantAreTakenTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := &slotCounting{Lock: testkit.Must(memlock.New())}
		s := testkit.Must(timers.New(l))
		var ran timerTicks
		addDueAndIdle(t, s, ran.fn)
		runFor(t, s, 5500*time.Millisecond)
		ran.each(t, 500, 1)
		wantCalls(t, "TryAcquireAnyEach", l.sizes(), l.single.Load(), 5, 100)
		if n := timers.SlotCalls(s); n != 5 {
			t.Errorf("%d slot calls, want 5", n)
		}
		if n := l.released.Load(); n != 500 {
			t.Errorf("%d slot grants released through ReleaseEach, want 500 (every run's)", n)
		}
	})
}

// The slots of one instant go in one call, and each tick still has its
// own outcome: a timer whose slots are all held skips its tick (busy), one
// whose slot request is unavailable skips it (unavailable) or, with
// WithRunWhenUnavailable, runs it under the per-host cap, one whose
// request fails otherwise skips it (error), and the others run.
func TestSlotOutcomesOfOneInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := &slotCounting{Lock: testkit.Must(memlock.New()), fail: map[string]error{
			"timer/down":     backendkit.Unavailable("test", errors.New("server down")),
			"timer/fallback": backendkit.Unavailable("test", errors.New("server down")),
			"timer/broken":   errors.New("the server said no"),
		}}
		s := testkit.Must(timers.New(l))
		var ran timerTicks
		add := func(name string, fn func(context.Context) error, opts ...timers.Option) {
			if err := s.Add(timers.Every(name, time.Second, fn, opts...)); err != nil {
				t.Fatal(err)
			}
		}
		add("ok", ran.fn)
		add("down", ran.fn)
		add("fallback", ran.fn, timers.WithRunWhenUnavailable(1))
		add("broken", ran.fn)
		add("long", func(ctx context.Context) error { // holds its one slot for 1.5 s
			time.Sleep(1500 * time.Millisecond)
			return nil
		})
		runFor(t, s, 4500*time.Millisecond)
		st := map[string]timers.Status{}
		for _, x := range s.Status() {
			st[x.Name] = x
		}
		if x := st["ok"]; x.Runs != 4 || x.Skips != 0 {
			t.Errorf("ok: %+v, want 4 runs", x)
		}
		if x := st["down"]; x.Runs != 0 || x.Skips != 4 || x.LastSkip.Reason != "unavailable" {
			t.Errorf("down: %+v, want 4 skips (unavailable)", x)
		}
		if x := st["fallback"]; x.Runs != 4 || !x.LastRun.Local {
			t.Errorf("fallback: %+v, want 4 local runs", x)
		}
		if x := st["broken"]; x.Runs != 0 || x.Skips != 4 || x.LastSkip.Reason != "error" {
			t.Errorf("broken: %+v, want 4 skips (error)", x)
		}
		// Ticks at 1, 2, 3, 4 s: the run of 1 s holds the slot until 2.5 s,
		// so 2 s is busy; 3 s runs until 4.5 s, so 4 s is busy.
		if x := st["long"]; x.Runs != 2 || x.Skips != 2 || x.LastSkip.Reason != "busy" {
			t.Errorf("long: %+v, want 2 runs and 2 skips (busy)", x)
		}
		if calls := l.sizes(); len(calls) != 4 || calls[0] != 5 {
			t.Errorf("TryAcquireAnyEach calls of %v requests: want 4 calls of 5", calls)
		}
	})
}

// stalledSlots is memlock whose first TryAcquireAnyEach hangs until its
// context ends, as a request to a server that does not answer.
type stalledSlots struct {
	*memlock.Lock
	calls atomic.Int64
}

func (s *stalledSlots) TryAcquireAnyEach(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
	if s.calls.Add(1) > 1 {
		return s.Lock.TryAcquireAnyEach(ctx, reqs)
	}
	<-ctx.Done()
	out := make([]lock.AnyResult, len(reqs))
	for i := range out {
		out[i].Err = backendkit.Unavailable("test", context.Cause(ctx))
	}
	return out
}

// An instant's slot call that hangs ends at the earliest next tick among
// its ticks (the attempt's deadline): the instant's ticks are skipped
// (unavailable) then, and the next instant's take their slots and run.
func TestStalledSlotCallEndsAtTheNextTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := &stalledSlots{Lock: testkit.Must(memlock.New())}
		s := testkit.Must(timers.New(l))
		var ran timerTicks
		for i := range 10 {
			if err := s.Add(timers.Every(fmt.Sprintf("s%d", i), time.Second, ran.fn)); err != nil {
				t.Fatal(err)
			}
		}
		skippedAt := make(chan time.Time, 1)
		go func() { // the fake clock: reads Status every millisecond
			for {
				time.Sleep(time.Millisecond)
				if st := s.Status()[0]; st.Skips > 0 {
					skippedAt <- time.Now()
					return
				}
			}
		}()
		runFor(t, s, 3500*time.Millisecond)
		skipped := <-skippedAt
		ran.each(t, 20, 1) // the ticks at 2 s and 3 s
		for _, st := range s.Status() {
			if st.Skips != 1 || st.LastSkip.Reason != "unavailable" || !st.LastSkip.Tick.Equal(epoch.Add(time.Second)) {
				t.Fatalf("%+v: want the tick at 1 s skipped (unavailable)", st)
			}
		}
		if want := epoch.Add(2 * time.Second); skipped.Before(want) || skipped.After(want.Add(5*time.Millisecond)) {
			t.Errorf("the stalled tick was skipped at %v, want at the next tick, %v", skipped.Sub(epoch), want.Sub(epoch))
		}
	})
}
