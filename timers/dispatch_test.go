package timers_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// eachCounting is memlock with a lock.EachClaimer that records every
// ClaimEach call of ticks (the number of requests in it) and counts
// single claims of ticks.
type eachCounting struct {
	*memlock.Lock
	callSizes
	single atomic.Int64
}

// callSizes records the number of requests of each call.
type callSizes struct {
	mu    sync.Mutex
	calls []int
}

func (c *callSizes) add(n int) {
	c.mu.Lock()
	c.calls = append(c.calls, n)
	c.mu.Unlock()
}

func (c *callSizes) sizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.calls...)
}

// wantCalls fails unless calls are n calls of size requests each and
// there was no single request.
func wantCalls(t *testing.T, what string, calls []int, single int64, n, size int) {
	t.Helper()
	ok := len(calls) == n && single == 0
	for _, c := range calls {
		ok = ok && c == size
	}
	if !ok {
		t.Fatalf("%s calls of %v requests and %d single requests: want %d calls of %d", what, calls, single, n, size)
	}
}

// addDueAndIdle adds 100 timers due every second and 100 due every hour,
// which fn runs.
func addDueAndIdle(t *testing.T, s *timers.Scheduler, fn func(context.Context) error) {
	t.Helper()
	for i := range 100 {
		for _, iv := range []time.Duration{time.Second, time.Hour} {
			if err := s.Add(timers.Every(fmt.Sprintf("t%d-%v", i, iv), iv, fn)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (c *eachCounting) ClaimEach(ctx context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	if len(reqs) > 0 && strings.HasPrefix(reqs[0].Key, "timer/") { // not the semaphores' size declarations
		c.add(len(reqs))
	}
	out := make([]lock.ClaimResult, len(reqs))
	for i, r := range reqs {
		out[i].Token, out[i].Err = c.Lock.Claim(ctx, r.Key, r.TTL)
	}
	return out
}

func (c *eachCounting) Claim(ctx context.Context, key string, ttl time.Duration) (uint64, error) {
	if strings.HasPrefix(key, "timer/") {
		c.single.Add(1)
	}
	return c.Lock.Claim(ctx, key, ttl)
}

// 100 timers due every second and 100 due every hour, for 5.5 s: the
// dispatcher wakes once per due instant (5), not per timer, and claims
// the 100 ticks of each instant in one ClaimEach call; the hourly timers,
// never due, cost nothing per tick. Every tick runs once.
func TestTicksOfOneInstantAreClaimedTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := &eachCounting{Lock: testkit.Must(memlock.New())}
		s := testkit.Must(timers.New(l))
		var ran timerTicks
		addDueAndIdle(t, s, ran.fn)
		runFor(t, s, 5500*time.Millisecond)
		if w := timers.Wakeups(s); w != 5 {
			t.Errorf("the dispatcher woke %d times, want 5 (once per due instant)", w)
		}
		wantCalls(t, "ClaimEach", l.sizes(), l.single.Load(), 5, 100)
		ran.each(t, 500, 1)
	})
}

// With WithRunsPerTick(2) on three hosts, each host's first choices of
// every timer due at an instant go in one ClaimEach call, and the timers
// whose choice was taken try their other claim in a second call: at most
// two calls per host and instant, and every tick still runs exactly twice.
func TestRunsPerTickClaimsInRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		table := testkit.Must(memlock.New())
		ctx, cancel := context.WithTimeout(t.Context(), 5500*time.Millisecond)
		defer cancel()
		var ran timerTicks
		var hosts []*eachCounting
		var wg sync.WaitGroup
		for range 3 {
			l := &eachCounting{Lock: testkit.Must(table.Share())}
			hosts = append(hosts, l)
			s := testkit.Must(timers.New(l))
			for i := range 20 {
				if err := s.Add(timers.Every(fmt.Sprintf("r%d", i), time.Second, ran.fn, timers.WithRunsPerTick(2))); err != nil {
					t.Fatal(err)
				}
			}
			wg.Go(func() { _ = s.Run(ctx) })
		}
		wg.Wait()
		ran.each(t, 100, 2)
		for i, l := range hosts {
			calls := l.sizes()
			if len(calls) < 5 || len(calls) > 10 || calls[0] != 20 || l.single.Load() != 0 {
				t.Errorf("host %d: ClaimEach calls of %v requests, %d single claims: want 5 to 10 calls, the first of 20", i, calls, l.single.Load())
			}
		}
	})
}

// timerTicks counts the runs of each tick of each timer.
type timerTicks struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *timerTicks) fn(ctx context.Context) error {
	tick, _ := timers.TickFrom(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[fmt.Sprint(tick.Timer, "@", tick.At.UnixMilli())]++
	return nil
}

// each fails unless ticks ticks ran, each runs times.
func (c *timerTicks) each(t *testing.T, ticks, runs int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.n) != ticks {
		t.Fatalf("%d ticks ran, want %d", len(c.n), ticks)
	}
	for tick, n := range c.n {
		if n != runs {
			t.Fatalf("tick %s ran %d times, want %d", tick, n, runs)
		}
	}
}

// Two hosts disagree on a timer's WithMaxConcurrency (2 here, 3 there):
// the scheduler checks the sizes of all its timers' semaphores at once
// (semaphore.CheckSizes) when it starts and every 30 s. Host B, started
// after A, finds A's size at once and skips every tick it claims (reason
// error); host A finds B's size at its check 30 s in, and skips from then
// on.
func TestSizeMismatchSkipsTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		table := testkit.Must(memlock.New())
		ctx, cancel := context.WithTimeout(t.Context(), 35500*time.Millisecond)
		defer cancel()
		var hosts []*timers.Scheduler
		var wg sync.WaitGroup
		for i, n := range []int{2, 3} {
			s := testkit.Must(timers.New(testkit.Must(table.Share()), timers.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)})))
			if err := s.Add(timers.Every("sized", time.Second, func(context.Context) error { return nil }, timers.WithMaxConcurrency(n))); err != nil {
				t.Fatal(err)
			}
			hosts = append(hosts, s)
			// Host B stops before the ticks after A's check at 30 s, so
			// that A claims them (and must skip them): with both hosts
			// up, B could win every one of them and A would never skip.
			hostCtx := ctx
			if i == 1 {
				c, cancel := context.WithTimeout(ctx, 31200*time.Millisecond)
				defer cancel()
				hostCtx = c
			}
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 1500 * time.Millisecond)
				_ = s.Run(hostCtx)
			})
		}
		wg.Wait()
		a, b := hosts[0].Status()[0], hosts[1].Status()[0]
		if b.Runs != 0 || b.Skips == 0 || b.LastSkip.Reason != "error" {
			t.Errorf("host B (size 3): %+v; want no run and its ticks skipped (error)", b)
		}
		if a.Runs == 0 || a.LastSkip.Reason != "error" || !a.LastSkip.Tick.After(epoch.Add(30*time.Second)) || a.LastRun.Tick.After(epoch.Add(30*time.Second)) {
			t.Errorf("host A (size 2): %+v; want runs until its check at 30 s, then skips (error)", a)
		}
	})
}

// batchCounting is memlock whose Batches record the handles of each Renew.
type batchCounting struct {
	*memlock.Lock
	mu     sync.Mutex
	renews []int
}

func (c *batchCounting) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	b, err := c.Lock.NewBatch(ctx, ttl)
	if err != nil {
		return nil, err
	}
	return &countedBatch{b, c}, nil
}

type countedBatch struct {
	lock.Batch
	c *batchCounting
}

func (b *countedBatch) Renew(ctx context.Context, hs []lock.Handle) []error {
	b.c.mu.Lock()
	b.c.renews = append(b.c.renews, len(hs))
	b.c.mu.Unlock()
	return b.Batch.Renew(ctx, hs)
}

// 50 timers every 10 s whose runs last 8 s: the runs' slot leases (ttl
// 10 s, renewed every 3.3 s) are kept by one lock.Keeper, renewed together
// in one Batch.Renew per renewal period (two per tick), not by a
// goroutine and a renewal each; Run ends with no slot held.
func TestSlotLeasesRenewedTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := &batchCounting{Lock: testkit.Must(memlock.New())}
		s := testkit.Must(timers.New(l))
		var ran timerTicks
		for i := range 50 {
			if err := s.Add(timers.Every(fmt.Sprintf("long-%d", i), 10*time.Second, func(ctx context.Context) error {
				time.Sleep(8 * time.Second)
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				return ran.fn(ctx)
			})); err != nil {
				t.Fatal(err)
			}
		}
		runFor(t, s, 35*time.Second)
		ran.each(t, 150, 1)
		l.mu.Lock()
		renews := l.renews
		l.mu.Unlock()
		if len(renews) != 6 {
			t.Errorf("Batch.Renew calls of %v handles: want 6 (two per tick)", renews)
		}
		for _, n := range renews {
			if n != 50 {
				t.Errorf("Batch.Renew calls of %v handles: want 50 each (every run's slot)", renews)
				break
			}
		}
		for _, st := range s.Status() {
			if st.Failures != 0 {
				t.Fatalf("status %+v", st)
			}
		}
		if held, _ := l.List(t.Context(), "sem/{timer/long-"); len(held) > 50 { // the size declarations only
			t.Errorf("%d grants left after Run: %v", len(held), held)
		}
	})
}

// slowSlots is memlock whose slot attempts (TryAcquireAny) take 10 ms
// and record how many are in flight at once. It does not take many slots
// in one call (no lock.AnyEachAcquirer), as etcdlock and pglock.
type slowSlots struct {
	*memlock.Lock
	inFlight, peak atomic.Int64
}

func (*slowSlots) TryAcquireAnyEach() {} // hides memlock's

func (s *slowSlots) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	time.Sleep(10 * time.Millisecond)
	return s.Lock.TryAcquireAny(ctx, keys, ttl)
}

// 100 timers due at one instant on a backend that takes slots one by one,
// and whose slot attempts take 10 ms: at most 16 attempts are in flight at once (so that they do not
// hold every connection of a client's pool while the next instant's
// claims wait), and every tick still runs, within its interval.
func TestSlotAttemptsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		l := &slowSlots{Lock: testkit.Must(memlock.New())}
		s := testkit.Must(timers.New(l))
		var ran timerTicks
		for i := range 100 {
			if err := s.Add(timers.Every(fmt.Sprintf("t%d", i), time.Second, ran.fn)); err != nil {
				t.Fatal(err)
			}
		}
		runFor(t, s, 3500*time.Millisecond)
		ran.each(t, 300, 1)
		if p := l.peak.Load(); p != 16 {
			t.Errorf("%d slot attempts in flight at once, want 16", p)
		}
	})
}

// 300 timers spread over the second (WithSpreadStart), for 3.5 s: the
// dispatcher wakes at multiples of 5 ms, once per 5 ms that holds a tick,
// not once per tick instant, and takes every tick of those 5 ms then; a
// tick never starts before its instant, nor a grain or more after it.
func TestWakeUpsOnTheGrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		const grain = 5 * time.Millisecond
		var mu sync.Mutex
		late := map[time.Time]time.Duration{} // by tick instant
		for i := range 300 {
			if err := s.Add(timers.Every(fmt.Sprintf("spread-%d", i), time.Second, func(ctx context.Context) error {
				tick, _ := timers.TickFrom(ctx)
				mu.Lock()
				late[tick.At] = time.Since(tick.At)
				mu.Unlock()
				return nil
			}, timers.WithSpreadStart())); err != nil {
				t.Fatal(err)
			}
		}
		runFor(t, s, 3500*time.Millisecond)
		grains := map[int64]bool{}
		for at, d := range late {
			if d < 0 || d >= grain {
				t.Errorf("tick %v started %v after its instant, want [0, %v)", at, d, grain)
			}
			grains[(at.UnixNano()+int64(grain)-1)/int64(grain)] = true
		}
		if len(late) < 900 {
			t.Fatalf("%d distinct tick instants ran, want about 1,050", len(late))
		}
		// The last wake-up's ticks may be cut short by Run's end (skipped).
		if w := timers.Wakeups(s); w < int64(len(grains)) || w > int64(len(grains))+1 {
			t.Errorf("the dispatcher woke %d times for ticks at %d instants in %d grains of 5 ms: want once per grain", w, len(late), len(grains))
		}
	})
}

// The runs of an instant go one after another on its goroutine; a run
// that blocks holds the others of its instant back for one wake grain at
// most (5 ms here): the dispatcher starts them, whether it wakes at the
// next grain anyway (dense: 300 more timers spread over the second) or
// only for them (the instant pokes it, as it would sleep until the next
// tick).
func TestBlockedRunHoldsItsInstantBackOneGrainAtMost(t *testing.T) {
	for _, iv := range []time.Duration{time.Second, time.Hour} {
		t.Run(iv.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(time.Until(epoch))
				s := testkit.Must(timers.New(testkit.Must(memlock.New())))
				const grain = 5 * time.Millisecond
				var mu sync.Mutex
				started := map[string]time.Duration{} // by timer, at its first tick
				release := make(chan struct{})
				if iv == time.Second {
					// Dense: ticks all over the second wake the
					// dispatcher at every grain.
					for i := range 300 {
						if err := s.Add(timers.Every(fmt.Sprint("spread-", i), iv, func(context.Context) error { return nil },
							timers.WithSpreadStart())); err != nil {
							t.Fatal(err)
						}
					}
				}
				for i := range 4 {
					name := fmt.Sprint("blocking-", i)
					if err := s.Add(timers.Every(name, iv, func(ctx context.Context) error {
						tick, _ := timers.TickFrom(ctx)
						mu.Lock()
						if _, ok := started[name]; !ok {
							started[name] = time.Since(tick.At)
						}
						mu.Unlock()
						<-release // every run blocks until the end
						return nil
					}, timers.WithTTL(2*iv))); err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error)
				go func() { done <- s.Run(ctx) }()
				time.Sleep(iv + 2*grain) // past the first tick and a grain
				synctest.Wait()
				mu.Lock()
				if len(started) != 4 {
					t.Errorf("%d of the 4 runs of the first tick started within a grain: %v", len(started), started)
				}
				for name, d := range started {
					if d > grain {
						t.Errorf("%s started %v after its tick; want %v at most", name, d, grain)
					}
				}
				mu.Unlock()
				close(release)
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// Runs that take a while each (a round trip, say) do not wait for the
// dispatcher: once an instant's runs have gone in turn for a millisecond,
// the instant's goroutine starts the rest each on a goroutine of its own.
func TestSlowRunsStartTheRestAfterAMillisecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch))
		s := testkit.Must(timers.New(testkit.Must(memlock.New())))
		var mu sync.Mutex
		started := map[string]time.Duration{}
		for i := range 4 {
			name := fmt.Sprint("slow-", i)
			if err := s.Add(timers.Every(name, time.Hour, func(ctx context.Context) error {
				tick, _ := timers.TickFrom(ctx)
				mu.Lock()
				started[name] = time.Since(tick.At)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the run's work
				return nil
			})); err != nil {
				t.Fatal(err)
			}
		}
		runFor(t, s, time.Hour+time.Second)
		if len(started) != 4 {
			t.Fatalf("%d of 4 runs started: %v", len(started), started)
		}
		for name, d := range started {
			// The first run takes 2 ms; the others start then, not in turn
			// after it (2, 4 and 6 ms, or the dispatcher's 5 ms).
			if d > 2*time.Millisecond {
				t.Errorf("%s started %v after its tick; want 2ms at most: %v", name, d, started)
			}
		}
	})
}
