package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/semaphore"
)

// target is a backend under the nemesis: a server the test may restart,
// and clients that reach it through a proxy.
type target struct {
	name    string
	ttl     time.Duration
	addrs   []string                                                 // the server's members' host:port, behind the proxies
	connect func(t *testing.T, proxies []string) (lock.Lock, func()) // a Lock whose client dials proxies (one per member), and its closer
	restart func(t testing.TB)                                       // a crash restart of the server
	// registry is the jobs workload's registry on this backend for a
	// client that dials proxies, and its closer.
	registry func(t *testing.T, proxies []string) (jobs.Registry, func())
	// killMember, on a cluster, stops member pick (the leader instead when
	// leader is set), waits down, and starts it again, noting what it did.
	killMember func(t *testing.T, pick int, leader bool, down time.Duration, note func(format string, args ...any))
	// losesGrants: a restart loses the grants (Redis without persistence):
	// holders across it may overlap their successors until their next
	// renewal, as redislock's documentation says; fencing still orders them.
	losesGrants bool
	// resetFrees: a reset connection frees its grants at the server at
	// once (PostgreSQL ends the session), before the holder can learn it;
	// the holder must then be told, and fencing orders its late writes.
	resetFrees bool
}

type config struct {
	seed     int64
	duration time.Duration
	workers  int
	slots    int  // 0: the lock workload (one key); n: a semaphore of n slots
	leader   bool // the leader workload: leader.Run with term-stamped writes
	timers   int  // n > 0: the timers workload, MaxConcurrency n
	perTick  int  // the timers workload: WithRunsPerTick(perTick) when > 1
	jobs     bool // the jobs workload: a jobs.Runner per worker, crashes, a completion ledger
}

func chaosConfig(t *testing.T) config {
	c := config{seed: time.Now().UnixNano() % 1e6, duration: 8 * time.Second, workers: 4}
	if os.Getenv("LEASEHOLD_CHAOS") == "1" {
		c.duration = time.Minute
	}
	if s := os.Getenv("LEASEHOLD_CHAOS_SEED"); s != "" {
		c.seed, _ = strconv.ParseInt(s, 10, 64)
	}
	return c
}

// runNemesis runs workers contending for one key, each through its own
// proxy, while a seeded nemesis injects faults; then it checks the history.
func runNemesis(t *testing.T, tg target, c config) {
	t.Logf("seed %d (replay: LEASEHOLD_CHAOS_SEED=%d go test -run '%s' ./chaos/)", c.seed, c.seed, t.Name())
	h := &history{Seed: c.seed, Backend: tg.name, ResetFrees: tg.resetFrees}
	rng := rand.New(rand.NewPCG(uint64(c.seed), 0))
	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	key := fmt.Sprintf("chaos/%s/%d", tg.name, c.seed)
	h.Limit = max(c.slots, c.timers, 1)
	if c.timers > 0 {
		h.Interval, h.PerTick = timerInterval, max(c.perTick, 1)
	}
	fences := map[string]*lock.Fence{}
	var fencesMu sync.Mutex
	fenceFor := func(key string) *lock.Fence {
		fencesMu.Lock()
		defer fencesMu.Unlock()
		if fences[key] == nil {
			fences[key] = new(lock.Fence)
		}
		return fences[key]
	}
	// The jobs workload's workers go on after the nemesis, until the
	// queue has drained.
	workCtx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	var q *queue
	var regs []jobs.Registry
	if c.jobs {
		q, h.Jobs = newQueue(), newLedger()
		go h.Jobs.produce(ctx, q)
	}
	proxies := make([]proxySet, c.workers)
	stall := make([]chan time.Duration, c.workers)
	var closers []func()
	var wg sync.WaitGroup
	for i := range c.workers {
		for _, addr := range tg.addrs {
			proxies[i] = append(proxies[i], faultproxy.Start(t, addr))
		}
		stall[i] = make(chan time.Duration, 1)
		l, closeFn := tg.connect(t, proxies[i].addrs())
		closers = append(closers, closeFn)
		seed := rng.Int64()
		acquire := func(ctx context.Context) (lock.Handle, error) { return lock.Acquire(ctx, l, key, tg.ttl) }
		if c.slots > 0 {
			sem, err := semaphore.New(l, key, c.slots)
			if err != nil {
				t.Fatal(err)
			}
			acquire = func(ctx context.Context) (lock.Handle, error) { return sem.AcquirePermit(ctx, tg.ttl) }
		}
		if c.jobs {
			reg, closeReg := tg.registry(t, proxies[i].addrs())
			regs = append(regs, reg)
			closers = append(closers, closeReg)
			wg.Go(func() { jobWorker(workCtx, i, l, reg, key, q, h.Jobs, stall[i], seed) })
			continue
		}
		if c.timers > 0 {
			wg.Go(func() { runTimers(ctx, i, l, key, c.timers, c.perTick, tg.ttl, fenceFor, h, stall[i], seed) })
			continue
		}
		if c.leader {
			wg.Go(func() { lead(ctx, i, l, key, tg.ttl, fenceFor, h, stall[i], seed) })
			continue
		}
		wg.Go(func() { work(ctx, i, acquire, tg.ttl, fenceFor, h, stall[i], seed) })
	}
	// The nemesis: a fault every so often, healed before the next.
	h.Begin = time.Now()
	kills := 0
	for ctx.Err() == nil {
		wait := time.Duration(200+rng.IntN(600)) * time.Millisecond
		victim := rng.IntN(c.workers)
		p := proxies[victim]
		if tg.killMember != nil && (kills == 0 || rng.IntN(3) == 0) { // the first kill stops the leader
			d := tg.ttl/2 + time.Duration(rng.Int64N(int64(tg.ttl)*2))
			tg.killMember(t, rng.IntN(len(tg.addrs)), kills == 0 || rng.IntN(2) == 0, d, h.fault)
			kills++
			sleep(ctx, wait)
			continue
		}
		switch f := rng.IntN(10); {
		case f < 3:
			d := tg.ttl/2 + time.Duration(rng.Int64N(int64(tg.ttl)*2))
			h.fault("blackhole worker %d for %v", victim, d)
			from := time.Now()
			p.SetMode(faultproxy.Blackhole)
			sleep(ctx, d)
			p.SetMode(faultproxy.Pass)
			h.cut(victim, "blackhole", from, time.Now())
		case f < 5:
			d := time.Duration(5+rng.IntN(60)) * time.Millisecond
			h.fault("delay worker %d by %v", victim, d)
			p.SetDelay(d)
			sleep(ctx, wait)
			p.SetDelay(0)
		case f < 7:
			h.fault("reset the connections of worker %d", victim)
			at := time.Now()
			p.ResetAll()
			h.cut(victim, "reset", at, time.Now())
		case f < 9:
			d := tg.ttl + time.Duration(rng.Int64N(int64(tg.ttl)))
			h.fault("stall worker %d for %v", victim, d)
			select {
			case stall[victim] <- d:
			default:
			}
		default:
			if tg.restart != nil {
				h.fault("restart the server")
				h.restarted(time.Now(), tg.losesGrants)
				tg.restart(t)
				h.restartDone(time.Now(), tg.losesGrants)
			}
		}
		sleep(ctx, wait)
	}
	h.Finish = time.Now()
	for _, p := range proxies {
		p.SetMode(faultproxy.Pass)
		p.SetDelay(0)
	}
	if c.jobs { // the drain: a few recovery intervals at most
		drain, cancel := context.WithTimeout(context.Background(), 15*jobLease)
		for drain.Err() == nil && !h.finished(drain, regs[0], q) {
			sleep(drain, 100*time.Millisecond)
		}
		cancel()
		h.Relaxed = append(h.Relaxed, fmt.Sprintf("drained in %v", time.Since(h.Finish).Round(time.Millisecond)))
	}
	stopWork()
	wg.Wait()
	bad := h.check()
	if c.timers > 0 {
		bad = append(bad, h.checkTicks()...)
	}
	if c.jobs {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		bad = append(bad, h.checkJobs(cctx, regs[0], q)...)
		cancel()
	}
	for _, closeFn := range closers {
		closeFn()
	}
	for _, p := range proxies {
		p.Close()
	}
	if len(bad) > 0 {
		path := h.save()
		for _, b := range bad[:min(len(bad), 10)] {
			t.Error(b)
		}
		t.Fatalf("%d violations with seed %d; history saved to %s", len(bad), c.seed, path)
	}
	// Everything the workers started has ended.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines+4 && time.Now().Before(deadline) {
		<-time.After(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines+4 {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after:\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
	}
	accepted := 0
	for _, w := range h.Writes {
		if w.Accepted {
			accepted++
		}
	}
	t.Logf("%d grants, %d writes (%d accepted), %d faults, exceptions %v", len(h.Grants), len(h.Writes), accepted, len(h.Faults), h.Relaxed)
	if len(h.Grants) < 3 && !c.jobs {
		t.Fatalf("only %d grants: the run did not exercise the lock", len(h.Grants))
	}
}

func sleep(ctx context.Context, d time.Duration) { _ = backendkit.Sleep(ctx, d) }

// proxySet is a worker's proxies, one per member of the server; a fault
// hits them all.
type proxySet []*faultproxy.Proxy

func (ps proxySet) addrs() []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Addr())
	}
	return out
}

func (ps proxySet) SetMode(m faultproxy.Mode) {
	for _, p := range ps {
		p.SetMode(m)
	}
}

func (ps proxySet) SetDelay(d time.Duration) {
	for _, p := range ps {
		p.SetDelay(d)
	}
}

func (ps proxySet) ResetAll() {
	for _, p := range ps {
		p.ResetAll()
	}
}

func (ps proxySet) Close() {
	for _, p := range ps {
		p.Close()
	}
}

// work is one worker: acquire, keep, write under the lease while it is
// valid, release; or, when the nemesis stalls it, stop looking at the lease
// for a while and then write anyway, as a paused process would.
func work(ctx context.Context, id int, acquire func(context.Context) (lock.Handle, error), ttl time.Duration,
	fenceFor func(key string) *lock.Fence, h *history, stall chan time.Duration, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 2*ttl)
		hd, err := acquire(actx)
		cancel()
		if err != nil {
			continue
		}
		g := grant{Worker: id, Key: hd.Key(), Token: hd.Token(), Start: time.Now()}
		fence := fenceFor(hd.Key())
		ph := &pausable{Handle: hd}
		lease, err := lock.Keep(context.Background(), ph, ttl)
		if err != nil {
			_ = hd.Release(context.Background())
			continue
		}
		var lossMu sync.Mutex
		var lossAt time.Time
		context.AfterFunc(lease.Context(), func() {
			lossMu.Lock()
			lossAt = time.Now()
			lossMu.Unlock()
		})
		hold := time.Duration(rng.Int64N(int64(ttl) * 2))
		end := time.Now().Add(hold)
		for time.Now().Before(end) {
			select {
			case d := <-stall:
				g.Stalled = true
				ph.pause(d) // the pause: neither the work nor the renewals run
				accepted := fence.Do(g.Token, nil) == nil
				h.addWrite(write{Worker: id, Key: g.Key, Token: g.Token, At: time.Now(), Accepted: accepted, Stalled: true})
			default:
			}
			now := time.Now()
			if lease.Context().Err() != nil || !now.Before(lease.ValidUntil()) {
				break
			}
			accepted := fence.Do(g.Token, nil) == nil
			h.addWrite(write{Worker: id, Key: g.Key, Token: g.Token, At: now, Accepted: accepted})
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
			if g.Stalled {
				break
			}
		}
		g.ValidUntil = lease.ValidUntil()
		g.End = g.ValidUntil
		if g.LossSeen = lease.Err() != nil; g.LossSeen {
			lossMu.Lock()
			g.LossAt = lossAt
			lossMu.Unlock()
			if !g.LossAt.IsZero() && g.LossAt.Before(g.End) {
				g.End = g.LossAt
			}
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*ttl)
		if releasing := time.Now(); releasing.Before(g.End) {
			g.End = releasing
		}
		err = lease.Release(rctx)
		g.ReleaseEnd = time.Now()
		switch {
		case err == nil:
			g.Release = "ok"
		case errors.Is(err, lock.ErrLost):
			g.Release = "lost"
		default:
			g.Release = "error"
		}
		cancel()
		h.addGrant(g)
	}
}

// pausable stalls a handle's renewals as a paused process would.
type pausable struct {
	lock.Handle
	mu    sync.Mutex
	until time.Time
}

func (p *pausable) pause(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	p.mu.Unlock()
	time.Sleep(d)
}

func (p *pausable) Extend(ctx context.Context, ttl time.Duration) error {
	p.mu.Lock()
	wait := time.Until(p.until)
	p.mu.Unlock()
	if wait > 0 {
		if err := backendkit.Sleep(ctx, wait); err != nil {
			return err
		}
	}
	return p.Handle.Extend(ctx, ttl)
}

// lead is a candidate of the leader workload: each term writes, stamped
// with its term, while its context says it leads, and resigns after a
// while so that terms turn over. A term's interval runs from fn's start to
// the cancellation of fn's context (or fn's return); leader.Run releases
// the lease only after that.
func lead(ctx context.Context, id int, l lock.Lock, name string, ttl time.Duration,
	fenceFor func(key string) *lock.Fence, h *history, stall chan time.Duration, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	var g grant // the current term, recorded once leader.Run has released it
	demoted := func(_ leader.Term, cause error) {
		// A term that resigned before its next renewal learns of a loss
		// (a restart that lost the grants) from the release, as ErrLost.
		if g.Release = "ok"; errors.Is(cause, lock.ErrLost) && !g.LossSeen {
			g.Release = "lost"
		}
		g.ReleaseEnd = time.Now()
		h.addGrant(g)
	}
	_ = leader.Run(ctx, l, name, func(lctx context.Context) error {
		term, _ := lock.TokenFrom(lctx)
		g = grant{Worker: id, Key: leader.Key(name), Token: term, Start: time.Now()}
		ended := endOf(lctx)
		fence := fenceFor(g.Key)
		resign := time.Now().Add(time.Duration(rng.Int64N(int64(ttl) * 2)))
		for time.Now().Before(resign) {
			select {
			case <-stall: // stalled leaders are the process tests' (leader.TestThreeProcesses)
			default:
			}
			now := time.Now()
			if lctx.Err() != nil {
				break
			}
			accepted := fence.Do(term, nil) == nil
			h.addWrite(write{Worker: id, Key: g.Key, Token: term, At: now, Accepted: accepted})
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		}
		g.End = ended() // or resigned: the lease is released after fn returns
		if g.LossSeen = errors.Is(context.Cause(lctx), lock.ErrLost); g.LossSeen {
			g.LossAt = g.End
		}
		g.ValidUntil = g.End
		return nil
	}, leader.WithTTL(ttl), leader.WithRenewInterval(ttl/3), leader.WithRetryInterval(ttl/2), leader.OnDemoted(demoted))
}

// endOf watches ctx; the function it returns stops watching and returns
// when ctx ended, or now if it has not.
func endOf(ctx context.Context) func() time.Time {
	var mu sync.Mutex
	var end time.Time
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		end = time.Now()
		mu.Unlock()
	})
	return func() time.Time {
		stop()
		mu.Lock()
		defer mu.Unlock()
		if end.IsZero() {
			return time.Now()
		}
		return end
	}
}
