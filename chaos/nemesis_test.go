package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
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
	// isolateLeader, on a cluster with peer proxies, cuts the leader
	// member off from its peers for down while its clients still reach it,
	// then heals it, noting what it did; it returns the member and the
	// isolation's bounds, or -1 when the cluster had no leader.
	isolateLeader func(t *testing.T, down time.Duration, note func(format string, args ...any)) (member int, from, to time.Time)
	// losesGrants: a restart loses the grants (Redis without persistence):
	// holders across it may overlap their successors until their next
	// renewal, as redislock's documentation says; fencing still orders them.
	losesGrants bool
	// resetFrees: a reset connection frees its grants at the server at
	// once (PostgreSQL ends the session), before the holder can learn it;
	// the holder must then be told, and fencing orders its late writes.
	resetFrees bool
	// quarantines: a restart or a failover forgets every grant, but the
	// server grants none of their keys before the lost holders'
	// ValidUntil (PostgreSQL; see history.Quarantines):
	// its holders must be told.
	quarantines bool
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
	// rw: the reader-writer workload: each worker takes the key shared
	// (a reader, two times in three) or exclusive (a writer, with fenced
	// writes), at random.
	rw bool
	// name tells apart runs that share a server (the failover runs): it
	// ends the key.
	name      string
	hold      time.Duration // the longest a lock holder or leader keeps its grant; 2 × ttl when 0
	minHold   time.Duration // the shortest a lock holder keeps its grant
	failovers int           // the failover nemesis: at least this many failovers
	// partitions: the nemesis only cuts groups of workers off (TestPartitionWorkerGroup).
	partitions bool
	// isolations: the nemesis only isolates the leader member of a
	// cluster from its peers for 1 to 3 s at a time (TestPartitionEtcdLeader).
	isolations bool
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
// proxy, while a seeded nemesis injects faults; then it checks the history,
// and returns it.
func runNemesis(t *testing.T, tg target, c config) *history {
	labelRun(t)
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	r := startRun(t, tg, c, ctx)
	h, rng := r.h, r.rng // the nemesis goes on with the workers' generator, as a seed always has
	// The nemesis: a fault every so often, healed before the next. The
	// first cuts a group of workers off, so that every run has one.
	kills := 0
	for ctx.Err() == nil {
		wait := time.Duration(200+rng.IntN(600)) * time.Millisecond
		if c.isolations {
			d := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
			if m, from, to := tg.isolateLeader(t, d, h.fault); m >= 0 {
				h.isolated(m, from, to)
			}
			// A partition is an episode, not the weather: the workers get
			// two ttls of a whole cluster (a new election, the clients
			// back on a member with a leader) before the next. Back to
			// back, the cluster was isolated about 80% of a run, and some
			// runs granted 2 terms in 18 s.
			sleep(ctx, 2*tg.ttl+wait)
			continue
		}
		if c.partitions || len(h.Partitions) == 0 || rng.IntN(10) == 0 {
			r.partition(ctx, tg.ttl)
			sleep(ctx, wait)
			continue
		}
		victim := rng.IntN(c.workers)
		p := r.proxies[victim]
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
			p.SetMode(faultproxy.Blackhole)
			from := time.Now()
			sleep(ctx, d)
			to := time.Now()
			p.SetMode(faultproxy.Pass)
			h.cut(victim, "blackhole", from, to)
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
			case r.stall[victim] <- d:
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
	if bad := r.finish(t); len(bad) > 0 {
		r.fail(t, bad)
	}
	r.report(t)
	checkGoroutines(t)
	return h
}

// partition cuts a group of the workers off from the server at once (a
// random non-empty proper subset, with a holder in it when there is one)
// for ttl/2 to 2.5 × ttl, while the others go on; it records a cut per
// worker in the group, so that the checker holds each of their holders to
// "the loss is told by ValidUntil".
//
// The first cut of a partitions-only run is the one that run must have:
// it waits (up to 4 × ttl) for a holder that means to hold past
// firstCutHolds, so that the cut, 2 × ttl long, outlasts its lease's
// ValidUntil (at most a ttl away) with the holder still holding, and the
// holder's lease must tell it of the loss. Any holder would not do: one
// whose hold ended before its ValidUntil released instead (it could not
// be told), and in a run of 7 cuts none was told (seed 893047).
func (r *run) partition(ctx context.Context, ttl time.Duration) {
	h, rng, n := r.h, r.rng, r.c.workers
	d := ttl/2 + time.Duration(rng.Int64N(int64(ttl)*2))
	held := h.holders()
	if r.c.partitions && len(h.Partitions) == 0 {
		d = 2 * ttl
		wait, cancel := context.WithTimeout(ctx, 4*ttl)
		for held = h.holdersPast(time.Now().Add(firstCutHolds(ttl))); wait.Err() == nil && len(held) == 0; held = h.holdersPast(time.Now().Add(firstCutHolds(ttl))) {
			sleep(wait, 5*time.Millisecond)
		}
		cancel()
	}
	order := rng.Perm(n)
	if len(held) > 0 {
		holder := held[rng.IntN(len(held))]
		for i, w := range order {
			if w == holder {
				order[0], order[i] = order[i], order[0]
			}
		}
	}
	group := order[:1+rng.IntN(n-1)]
	slices.Sort(group)
	h.fault("cut workers %v off for %v", group, d)
	for _, w := range group {
		r.proxies[w].SetMode(faultproxy.Blackhole)
	}
	from := time.Now()
	sleep(ctx, d)
	to := time.Now()
	for _, w := range group {
		r.proxies[w].SetMode(faultproxy.Pass)
	}
	h.partitioned(group, from, to)
}

// firstCutHolds is how long past the first cut of a partitions-only run
// its holder must mean to hold: a ttl (its ValidUntil is at most that far)
// and a quarter more, for the lease to tell it and the checker's slack
// (toldWithin). TestPartitionWorkerGroup's holds of at least 1.5 × ttl
// make every new holder one for a quarter of a ttl.
func firstCutHolds(ttl time.Duration) time.Duration { return ttl + ttl/4 }

// run is one workload's workers and history under a nemesis.
type run struct {
	c       config
	h       *history
	rng     *rand.Rand // the seed's generator, after the workers' seeds
	key     string     // the workload's key (the timer's, the election's name)
	proxies []proxySet
	stall   []chan time.Duration
	wg      sync.WaitGroup
	q       *queue
	regs    []jobs.Registry
	closers []func()
	stop    context.CancelFunc // ends the jobs workload's workers
}

// startRun starts c's workers on tg, each through its own proxy; they stop
// when ctx ends (the jobs workload's, at finish).
func startRun(t *testing.T, tg target, c config, ctx context.Context) *run {
	t.Logf("seed %d (replay: LEASEHOLD_CHAOS_SEED=%d go test -run '%s' ./chaos/)", c.seed, c.seed, t.Name())
	r := &run{c: c, h: &history{Seed: c.seed, Backend: tg.name, ResetFrees: tg.resetFrees, Quarantines: tg.quarantines, TTL: tg.ttl}}
	h := r.h
	r.rng = rand.New(rand.NewPCG(uint64(c.seed), 0))
	rng := r.rng
	key := fmt.Sprintf("chaos/%s/%d", tg.name, c.seed)
	if c.name != "" {
		key += "/" + c.name
		h.Backend += "-" + c.name
	}
	r.key = key
	h.Limit = max(c.slots, c.timers, 1)
	if c.timers > 0 {
		h.Interval, h.PerTick = timerInterval, max(c.perTick, 1)
	}
	hold := 2 * tg.ttl
	if c.hold > 0 {
		hold = c.hold
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
	r.stop = stopWork
	if c.jobs {
		r.q, h.Jobs = newQueue(), newLedger()
		go h.Jobs.produce(ctx, r.q)
	}
	r.proxies = make([]proxySet, c.workers)
	r.stall = make([]chan time.Duration, c.workers)
	for i := range c.workers {
		for _, addr := range tg.addrs {
			r.proxies[i] = append(r.proxies[i], faultproxy.Start(t, addr))
		}
		r.stall[i] = make(chan time.Duration, 1)
		l, closeFn := tg.connect(t, r.proxies[i].addrs())
		r.closers = append(r.closers, closeFn)
		seed := rng.Int64()
		acquire := func(ctx context.Context) (lock.Handle, error) { return lock.Acquire(ctx, l, key, tg.ttl) }
		if c.slots > 0 {
			sem, err := semaphore.New(l, key, c.slots)
			if err != nil {
				t.Fatal(err)
			}
			acquire = func(ctx context.Context) (lock.Handle, error) { return sem.AcquirePermit(ctx, tg.ttl) }
		}
		if c.rw {
			sl, ok := l.(lock.SharedLock)
			if !ok {
				t.Fatalf("%s: %T is not a lock.SharedLock", tg.name, l)
			}
			pick := rand.New(rand.NewPCG(uint64(seed), 2))
			acquire = func(ctx context.Context) (lock.Handle, error) {
				if pick.IntN(3) == 0 {
					return lock.Acquire(ctx, l, key, tg.ttl)
				}
				h, err := lock.AcquireShared(ctx, sl, key, tg.ttl)
				if err != nil {
					return nil, err
				}
				return sharedHandle{h}, nil
			}
		}
		stall := r.stall[i]
		switch {
		case c.jobs:
			reg, closeReg := tg.registry(t, r.proxies[i].addrs())
			r.regs = append(r.regs, reg)
			r.closers = append(r.closers, closeReg)
			r.wg.Go(func() { jobWorker(workCtx, i, l, reg, key, r.q, h.Jobs, stall, seed) })
		case c.timers > 0:
			r.wg.Go(func() { runTimers(ctx, i, l, key, c.timers, c.perTick, tg.ttl, fenceFor, h, stall, seed) })
		case c.leader:
			r.wg.Go(func() { lead(ctx, i, l, key, tg.ttl, hold, fenceFor, h, stall, seed) })
		default:
			r.wg.Go(func() { work(ctx, i, acquire, tg.ttl, c.minHold, hold, fenceFor, h, stall, seed) })
		}
	}
	h.Begin = time.Now()
	return r
}

// finish heals the proxies, lets the jobs workload drain, stops the
// workers, and returns the checker's violations.
func (r *run) finish(t *testing.T) []string {
	h, c := r.h, r.c
	h.Finish = time.Now()
	for _, p := range r.proxies {
		p.SetMode(faultproxy.Pass)
		p.SetDelay(0)
	}
	if c.jobs {
		// The drain: until every job is accounted for, as long as each
		// 15 recovery intervals account for more of them (a backlog that
		// long outages left, as the acknowledged writes' under repeated
		// failovers, drains at the workers' pace), two minutes at most.
		drain, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for left, progress := -1, time.Now(); drain.Err() == nil; sleep(drain, 100*time.Millisecond) {
			n := h.unfinishedCount(drain, r.regs[0], r.q)
			if n == 0 {
				break
			}
			if left < 0 || n < left {
				left, progress = n, time.Now()
			}
			if time.Since(progress) > 15*jobLease {
				break
			}
		}
		cancel()
		h.Relaxed = append(h.Relaxed, fmt.Sprintf("drained in %v", time.Since(h.Finish).Round(time.Millisecond)))
	}
	r.stop()
	r.wg.Wait()
	bad := h.check()
	if c.timers > 0 {
		bad = append(bad, h.checkTicks()...)
	}
	if c.jobs {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		bad = append(bad, h.checkJobs(cctx, r.regs[0], r.q)...)
		cancel()
	}
	for _, closeFn := range r.closers {
		closeFn()
	}
	for _, p := range r.proxies {
		p.Close()
	}
	return bad
}

// fail reports a run's violations and where its history was saved.
func (r *run) fail(t *testing.T, bad []string) {
	t.Helper()
	path := r.h.save()
	for _, b := range bad[:min(len(bad), 10)] {
		t.Error(b)
	}
	t.Errorf("%d violations with seed %d; history saved to %s", len(bad), r.c.seed, path)
}

// report logs what the run did, and fails a lock run that granted little.
func (r *run) report(t *testing.T) {
	t.Helper()
	h := r.h
	accepted := 0
	for _, w := range h.Writes {
		if w.Accepted {
			accepted++
		}
	}
	t.Logf("%s: %d grants, %d writes (%d accepted), %d faults (%d group cuts; %d holders cut off at their ValidUntil, told in time), exceptions %v",
		h.Backend, len(h.Grants), len(h.Writes), accepted, len(h.Faults), len(h.Partitions), h.Told, h.Relaxed)
	if len(h.Grants) < 3 && !r.c.jobs {
		t.Errorf("%s: only %d grants: the run did not exercise the lock", h.Backend, len(h.Grants))
	}
}

// labelRun labels the test's goroutine, and so every goroutine it starts
// from now on (the workers, their clients' pools, the proxies), with the
// test's name: checkGoroutines counts those alone, whatever the tests that
// run in parallel do.
func labelRun(t *testing.T) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("chaos", t.Name())))
	t.Cleanup(func() { pprof.SetGoroutineLabels(context.Background()) })
}

// runGoroutines counts the goroutines labelled with the test's name.
func runGoroutines(t *testing.T) (int, string) {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	label := fmt.Sprintf("# labels: {%q:%q}", "chaos", t.Name())
	n, stacks := 0, ""
	for _, group := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(group, label) {
			continue
		}
		for _, line := range strings.Split(group, "\n") { // the group's "<count> @ <pcs>"
			var count int
			if _, err := fmt.Sscanf(line, "%d @", &count); err == nil {
				n += count
				stacks += group + "\n\n"
				break
			}
		}
	}
	return n, stacks
}

// checkGoroutines fails the test unless everything its runs started has
// ended: of the goroutines labelled by labelRun, only the test's own (and
// a few in passing) are left.
func checkGoroutines(t *testing.T) {
	t.Helper()
	if t.Failed() {
		return
	}
	const left = 5
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := runGoroutines(t); n > left && time.Now().Before(deadline); n, _ = runGoroutines(t) {
		<-time.After(50 * time.Millisecond)
	}
	if n, stacks := runGoroutines(t); n > left {
		t.Fatalf("%d goroutines the test started are still running:\n%s", n, stacks)
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
func work(ctx context.Context, id int, acquire func(context.Context) (lock.Handle, error), ttl, minHold, maxHold time.Duration,
	fenceFor func(key string) *lock.Fence, h *history, stall chan time.Duration, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 2*ttl)
		hd, err := acquire(actx)
		cancel()
		if err != nil {
			continue
		}
		_, shared := hd.(sharedHandle)
		g := grant{Worker: id, Key: hd.Key(), Token: hd.Token(), Start: time.Now(), Shared: shared}
		fence := fenceFor(hd.Key())
		ph := &pausable{Handle: hd}
		lease, err := lock.Keep(context.Background(), ph, ttl)
		if err != nil {
			_ = hd.Release(context.Background())
			continue
		}
		hold := minHold + time.Duration(rng.Int64N(int64(maxHold-minHold)))
		end := time.Now().Add(hold)
		h.holding(id, end)
		var lossMu sync.Mutex
		var lossAt time.Time
		context.AfterFunc(lease.Context(), func() {
			lossMu.Lock()
			lossAt = time.Now()
			lossMu.Unlock()
		})
		for time.Now().Before(end) {
			select {
			case d := <-stall:
				g.Stalled = true
				ph.pause(d) // the pause: neither the work nor the renewals run
				// Readers read: only writers write to the fenced resource.
				if !shared {
					accepted := fence.Do(g.Token, nil) == nil
					h.addWrite(write{Worker: id, Key: g.Key, Token: g.Token, At: time.Now(), Accepted: accepted, Stalled: true})
				}
			default:
			}
			now := time.Now()
			if lease.Context().Err() != nil || !now.Before(lease.ValidUntil()) {
				break
			}
			if !shared {
				accepted := fence.Do(g.Token, nil) == nil
				h.addWrite(write{Worker: id, Key: g.Key, Token: g.Token, At: now, Accepted: accepted})
			}
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
			if g.Stalled {
				break
			}
		}
		// A holder whose validity has passed waits to be told: the lease
		// promises it at ValidUntil (the checker bounds how late).
		if lease.Err() == nil && !time.Now().Before(lease.ValidUntil()) {
			select {
			case <-lease.Context().Done():
			case <-time.After(2 * toldWithin):
			}
		}
		g.ValidUntil, g.Kept = lease.ValidUntil(), true
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
		h.holding(id, time.Time{})
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

// sharedHandle marks a shared grant of the reader-writer workload.
type sharedHandle struct{ lock.Handle }

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
func lead(ctx context.Context, id int, l lock.Lock, name string, ttl, maxHold time.Duration,
	fenceFor func(key string) *lock.Fence, h *history, stall chan time.Duration, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	var g grant // the current term, recorded once leader.Run has released it
	demoted := func(t leader.Term, cause error) {
		defer func() { g = grant{} }()
		if g.Start.IsZero() || g.Token != t.Term {
			// The term ended before fn started (leader.Run then skips fn,
			// and OnDemoted follows): no write was made in it, and g is
			// still the previous term, recorded already.
			return
		}
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
		resign := time.Now().Add(time.Duration(rng.Int64N(int64(maxHold))))
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
