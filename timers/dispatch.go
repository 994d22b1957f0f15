package timers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/semaphore"
)

// The dispatcher. One goroutine per Scheduler (Run's own) keeps the
// timers in a heap ordered by their next tick and sleeps until the
// earliest one. When it wakes it takes every timer due by then (a misfire
// is skipped there), moves each one to its next tick, and hands the ticks
// it took to one goroutine for that instant, which claims them together
// (lock.ClaimEach) and starts a run per claimed tick. The timers that are
// not due cost nothing: the dispatcher wakes only at due instants, and
// taking the due ones off the heap costs O(log timers) each.

// tickHeap orders the timers by their next tick, in Unix nanoseconds, so
// that ordering them reads the heap's array only; an Every timer's
// interval and misfire threshold are there too, so that taking its tick
// reads nothing else (at 10,000 timers, the entries, their Timers and
// schedules are cache misses each, and were a third of the dispatcher's
// time). It is a 4-ary min-heap of its own rather than container/heap's,
// whose calls through an interface cost a tenth of the dispatcher's time
// at 10,000 timers.
type tickHeap []heapItem

type heapItem struct {
	at      int64 // the timer's next tick, Unix nanoseconds
	every   int64 // an Every timer's interval; 0 for a cron schedule
	misfire int64 // an Every timer's misfire threshold (misfireFor)
	e       *entry
}

// itemOf is e's heap item for its tick at.
func itemOf(e *entry, at time.Time) heapItem {
	it := heapItem{at: at.UnixNano(), e: e}
	if ev, ok := e.t.schedule.(every); ok {
		it.every, it.misfire = int64(ev.interval), int64(e.t.misfireFor(ev.interval))
	}
	return it
}

// next is the tick after at (Unix nanoseconds) of the item's timer: on an
// Every timer's grid, at plus the interval (zero past the range of a
// Time, as every.next).
func (it *heapItem) next(at int64) time.Time {
	if it.every > 0 {
		if at > math.MaxInt64-it.every {
			return time.Time{}
		}
		return time.Unix(0, at+it.every)
	}
	return it.e.t.schedule.next(time.Unix(0, at))
}

// misfireFor is the item's timer's misfire threshold for a gap of iv.
func (it *heapItem) misfireFor(iv time.Duration) time.Duration {
	if it.every > 0 {
		return time.Duration(it.misfire)
	}
	return it.e.t.misfireFor(iv)
}

// init orders the whole heap.
func (h tickHeap) init() {
	for i := (len(h) - 2) / heapArity; i >= 0; i-- {
		h.down(i)
	}
}

// heapArity is the heap's fan-out: a 4-ary heap is half as deep as a
// binary one, and an item's 4 children sit in 2 cache lines (10,000 timers
// are 320 KB of items, taking a tick goes down the heap once).
const heapArity = 4

// down moves item i down to its place.
func (h tickHeap) down(i int) {
	n := len(h)
	it := h[i]
	for {
		first := heapArity*i + 1
		if first >= n {
			break
		}
		c := first
		for j := first + 1; j < min(first+heapArity, n); j++ {
			if h[j].at < h[c].at {
				c = j
			}
		}
		if h[c].at >= it.at {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = it
}

// popRoot removes the earliest item.
func (h *tickHeap) popRoot() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	old[n] = heapItem{}
	*h = old[:n]
	if n > 0 {
		h.down(0)
	}
}

// due is one tick taken by the dispatcher, with its claim's and then its
// slot's outcome.
// 10,000 are made a second at 10,000 timers, in one slice per instant:
// it is kept small (144 bytes; the tick's instant and claim live in tick),
// and it holds the run's context, so that a run makes none for its tick.
type due struct {
	e      *entry
	tick   Tick              // At: the tick; Claim: its claim's token; the rest set by run
	iv     time.Duration     // the gap to the timer's next tick
	first  int               // WithRunsPerTick: the claim tried first
	err    error             // the claim's, then the slot's
	lease  time.Duration     // the slot lease's ttl
	permit *semaphore.Permit // the slot
	ctx    tickContext       // the run's context, with the tick (runTick)
}

// interval is the gap from the tick to the timer's next one.
func (d *due) interval() time.Duration { return d.iv }

// next is the timer's tick after this one.
func (d *due) next() time.Time { return d.tick.At.Add(d.iv) }

// dispatch runs the dispatcher until ctx ends, then waits until every
// instant it handed off has started its runs (or given up).
func (s *Scheduler) dispatch(ctx, runCtx context.Context, runs *sync.WaitGroup, entries []*entry) {
	clock := s.set.clock
	h := make(tickHeap, 0, len(entries))
	now := clock()
	for _, e := range entries {
		if at := e.t.schedule.next(now); at.After(now) {
			e.setNext(at)
			h = append(h, itemOf(e, at))
		} else {
			e.stop(now)
		}
	}
	h.init()
	grain := wakeGrain(entries)
	s.rq.inline = max(grain, time.Millisecond)
	defer s.rq.fanOutAll(runs)
	lastTicks := 0 // how many ticks the last wake-up took: the next one's guess
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	for len(h) > 0 {
		wakeAt := roundUp(time.Unix(0, h[0].at), grain)
		s.rq.wake.Store(wakeAt.UnixNano())
		if d := s.rq.sweep(runs, clock()); !d.IsZero() && d.Before(wakeAt) {
			wakeAt = d
			s.rq.wake.Store(wakeAt.UnixNano())
		}
		switch s.sleepUntil(ctx, wait, wakeAt) {
		case cancelled:
			return
		case poked:
			continue
		}
		now := clock()
		if h[0].at > now.UnixNano() {
			continue // woken for the runs of an instant (runQueues)
		}
		s.wakeups.Add(1)
		nowNs := now.UnixNano()
		ticks := make([]due, 0, lastTicks+lastTicks/4+4) // slack: spread ticks vary by a few a grain
		for len(h) > 0 && h[0].at <= nowNs {
			it := &h[0]
			e, at := it.e, time.Unix(0, it.at)
			next := it.next(it.at)
			switch {
			case !next.After(at):
				// Defensive: Add refused a schedule with no tick to come,
				// but one can still run out (a tick a Time cannot hold);
				// nothing would bound tick at's claim, and a tick that
				// does not advance would spin: the timer stops.
				h.popRoot()
				e.stop(at)
				continue
			case now.Sub(at) > it.misfireFor(next.Sub(at)):
				e.skip(ctx, at, "misfire", fmt.Sprintf("reached %v late", now.Sub(at).Round(time.Millisecond)))
				if next = e.t.schedule.next(now); !next.After(now) {
					h.popRoot()
					e.stop(now)
					continue
				}
			default:
				ticks = append(ticks, due{e: e, tick: Tick{At: at}, iv: next.Sub(at)})
			}
			it.at = next.UnixNano()
			h.down(0)
			e.setNext(next)
		}
		lastTicks = len(ticks)
		if len(ticks) > 0 {
			// Counted in runs: its inline runs are runs (startRuns), and
			// Run's wait for them is bounded by the shutdown timeout.
			s.pool.Go(runs, funcRunner(func() { s.runInstant(ctx, runCtx, runs, ticks) }))
		}
	}
	// Every timer stopped: the runs of the last instants still go on.
	for {
		wakeAt := s.rq.sweep(runs, clock())
		if wakeAt.IsZero() {
			wakeAt = clock().Add(time.Hour)
		}
		s.rq.wake.Store(wakeAt.UnixNano())
		if s.sleepUntil(ctx, wait, wakeAt) == cancelled {
			return
		}
	}
}

// maxWakeGrain bounds the dispatcher's wake-up grain (wakeGrain).
const maxWakeGrain = 5 * time.Millisecond

// wakeGrain is the grain of the dispatcher's wake-ups: it wakes at
// multiples of it (from the Unix epoch), so that the ticks due within one
// grain are taken in one wake-up, claimed together and their slots taken
// together. A wake-up costs tens of microseconds of CPU whatever it
// takes, and timers spread over the second (WithSpreadStart) woke it a
// few thousand times a second at 10,000 timers. A tick on the grain
// (every whole second, for instance) starts when it did; another starts
// at most one grain late: maxWakeGrain (5 ms) at most, a sixteenth of the
// shortest interval among the timers and a quarter of the smallest
// WithMisfireThreshold, so that no tick comes near its misfire threshold
// for it. 1 ns (no grain) when that is below 100 µs.
func wakeGrain(entries []*entry) time.Duration {
	g := maxWakeGrain
	for _, e := range entries {
		var iv time.Duration
		switch sc := e.t.schedule.(type) {
		case every:
			iv = sc.interval
		default:
			iv = shortestGap(sc)
		}
		g = min(g, iv/16)
		if e.t.misfire > 0 {
			g = min(g, e.t.misfire/4)
		}
	}
	if g < 100*time.Microsecond {
		return 1
	}
	return g
}

// roundUp is at rounded up to a multiple of grain from the Unix epoch
// (at itself when that does not fit an int64 of nanoseconds).
func roundUp(at time.Time, grain time.Duration) time.Time {
	if sec := at.Unix(); sec <= math.MinInt64/int64(time.Second)+1 || sec >= math.MaxInt64/int64(time.Second)-1 {
		return at // no int64 of nanoseconds holds it
	}
	ns, g := at.UnixNano(), int64(grain)
	r := ns % g
	if r < 0 {
		r += g
	}
	if r == 0 || ns > math.MaxInt64-g {
		return at
	}
	return time.Unix(0, ns-r+g)
}

// How a dispatcher's sleep ended.
const (
	reached   = iota // the clock reached the time
	poked            // an instant's runs need the dispatcher sooner (runQueues)
	cancelled        // ctx ended
)

// sleepUntil waits on t until the scheduler's clock reads at, ctx ends or
// an instant's runs poke the dispatcher.
func (s *Scheduler) sleepUntil(ctx context.Context, t *time.Timer, at time.Time) int {
	for {
		d := at.Sub(s.set.clock())
		if d <= 0 {
			if ctx.Err() != nil {
				return cancelled
			}
			return reached
		}
		t.Reset(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return cancelled
		case <-s.rq.poke:
			t.Stop()
			return poked
		case <-t.C:
		}
	}
}

// runInstant claims the ticks due at one instant together, then takes
// the slots of the claimed ones and starts a run for each tick that holds
// one: the slots together in one call, then the runs, on a backend that
// takes them together (takeSlots); otherwise each tick takes its slot on
// the goroutine of its run, and runs as soon as it holds it (takeSlot).
// The attempts (the claims and the slots) end by the earliest next tick
// among them, so that a backend that stalls (a pool with no free
// connection, a hung request) costs this instant only, not the timers'
// later ones; a tick reached after its next one (within a misfire
// threshold longer than its interval) bounds them by its threshold
// instead. (A claim that comes back after the misfire threshold is
// skipped; a slow attempt is not cut short at the threshold, since a
// connection being opened is worth keeping.) An instant that starts
// after ctx ended claims nothing; once it claimed, the end of ctx does
// not cut its attempts short (they live in runCtx, which Run keeps until
// the runs end or the shutdown timeout): a claim that landed as the host
// shut down would otherwise leave the tick claimed and run nowhere.
func (s *Scheduler) runInstant(ctx, runCtx context.Context, runs *sync.WaitGroup, ticks []due) {
	if ctx.Err() != nil {
		return // shut down: another host takes these ticks
	}
	start := s.set.clock()
	var until time.Time
	for i := range ticks {
		d := &ticks[i]
		u := d.next()
		if !u.After(start) {
			u = d.tick.At.Add(d.e.t.misfireFor(d.interval()))
		}
		if i == 0 || u.Before(until) {
			until = u
		}
	}
	attempt, cancel := context.WithTimeout(runCtx, until.Sub(start))
	defer cancel()
	s.claim(attempt, ticks)
	now := s.set.clock() // the claims came back
	won := make([]*due, 0, len(ticks))
	for i := range ticks {
		if d := &ticks[i]; d.e.claimed(ctx, runCtx, runs, d, now) {
			d.lease = d.e.t.leaseFor(d.interval(), s.lim)
			won = append(won, d)
		}
	}
	if len(won) == 0 {
		return
	}
	if !s.slotsTogether() {
		var slots sync.WaitGroup
		slots.Add(len(won))
		for _, d := range won {
			s.pool.Go(runs, funcRunner(func() {
				d.permit, d.err = s.takeSlot(attempt, d.e.sem, d.lease)
				slots.Done()
				if d.e.slotted(ctx, runCtx, runs, d) {
					d.run()
				}
			}))
		}
		slots.Wait() // attempt must outlive the slots' attempts
		return
	}
	s.takeSlots(attempt, won)
	cancel()
	ready := won[:0]
	for _, d := range won {
		if d.e.slotted(ctx, runCtx, runs, d) {
			ready = append(ready, d)
		}
	}
	s.rq.run(runs, ready, s.set.clock())
}

// claim takes one claim of each tick: in one lock.ClaimEach for all of
// them (one round trip per chunk on an EachClaimer). With
// WithRunsPerTick(n) a tick has n claims; each host tries them from a
// random one on so that the hosts spread over them: the first choices of
// every tick go in one call, then the ticks whose choice was taken try
// their next claim in the next call, and so on, n calls at most.
func (s *Scheduler) claim(ctx context.Context, ticks []due) {
	pending := make([]*due, 0, len(ticks))
	for i := range ticks {
		d := &ticks[i]
		if n := d.e.t.runsPerTick; n > 1 {
			d.first = rand.IntN(n)
		}
		pending = append(pending, d)
	}
	reqs := make([]lock.ClaimRequest, 0, len(ticks))
	for round := 0; len(pending) > 0; round++ {
		reqs = reqs[:0]
		for _, d := range pending {
			t := d.e.t
			reqs = append(reqs, lock.ClaimRequest{Key: d.e.claimKey(d.tick.At, (d.first+round)%t.runsPerTick), TTL: t.claimTTL(d.interval(), s.lim)})
		}
		res := s.claimEach(ctx, reqs)
		rest := pending[:0]
		for i, d := range pending {
			d.tick.Claim, d.err = res[i].Token, res[i].Err
			if errors.Is(d.err, lock.ErrNotAcquired) && round+1 < d.e.t.runsPerTick {
				rest = append(rest, d)
			}
		}
		pending = rest
	}
}

// claimWorkers bounds the claims made at once on a backend that cannot
// make them together (not a lock.EachClaimer).
const claimWorkers = 16

// claimEach makes reqs: in one lock.ClaimEach on an EachClaimer (the
// backend chunks it); otherwise one lock.Claim each, up to claimWorkers
// at a time, so that a backend without it costs no more wall time per
// instant than when every timer claimed on its own.
func (s *Scheduler) claimEach(ctx context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	if _, ok := s.l.(lock.EachClaimer); ok || len(reqs) == 1 {
		s.claimCalls.Add(1)
		return lock.ClaimEach(ctx, s.l, reqs)
	}
	s.claimCalls.Add(int64(len(reqs)))
	res := make([]lock.ClaimResult, len(reqs))
	forEach(len(reqs), claimWorkers, func(i int) {
		res[i].Token, res[i].Err = lock.Claim(ctx, s.l, reqs[i].Key, reqs[i].TTL)
	})
	return res
}

// forEach calls fn(i) for every i in [0, n), from up to workers
// goroutines (none of its own when n is 1).
func forEach(n, workers int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// claimed goes on with a tick whose claim has come back: counted
// elsewhere, skipped, or run under the per-host cap; true when it was
// granted and the run is to take a slot. now is when it came back.
func (e *entry) claimed(ctx, runCtx context.Context, runs *sync.WaitGroup, d *due, now time.Time) bool {
	at, err := d.tick.At, d.err
	if err == nil || errors.Is(err, lock.ErrNotAcquired) {
		e.reachable(at)
	}
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		e.record(func(st *Status) { st.Elsewhere++ })
		return false
	case errors.Is(err, lock.ErrUnavailable):
		e.unavailable(ctx, runCtx, runs, at, err)
		return false
	case err != nil:
		e.skip(ctx, at, "error", err.Error())
		return false
	}
	// The claim proves the tick unclaimed only if it was granted while the
	// earlier claims of this tick were still alive, and they live from at
	// least at to at + interval + threshold: a grant that came back after
	// the threshold (a request held up in the network, retried by the
	// client) may have outlived them, and another host may have run it.
	if late := now.Sub(at); late > e.t.misfireFor(d.interval()) {
		e.skip(ctx, at, "misfire", fmt.Sprintf("the claim came back %v late", late.Round(time.Millisecond)))
		return false
	}
	e.mu.Lock()
	mismatch := e.mismatch
	e.mu.Unlock()
	if mismatch != nil {
		e.skip(ctx, at, "error", mismatch.Error())
		return false
	}
	return true
}

// slotted goes on with a claimed tick whose slot attempt has come back:
// skipped when every slot is busy or on an error, run under the per-host
// cap when the backend did not answer; true when the tick holds its slot.
func (e *entry) slotted(ctx, runCtx context.Context, runs *sync.WaitGroup, d *due) bool {
	switch err := d.err; {
	case errors.Is(err, lock.ErrNotAcquired):
		e.skip(ctx, d.tick.At, "busy", fmt.Sprintf("all %d slots busy", e.t.maxConcurrency))
		return false
	case errors.Is(err, lock.ErrUnavailable):
		e.unavailable(ctx, runCtx, runs, d.tick.At, err)
		return false
	case err != nil:
		e.skip(ctx, d.tick.At, "error", err.Error())
		return false
	}
	return true
}

// run runs the tick on its slot (runner, for the pool).
func (d *due) run() { d.runTick() }

// runTick runs the tick on its slot, which it holds while fn runs; it
// returns when it ended, on the scheduler's clock.
func (d *due) runTick() (end time.Time) {
	e := d.e
	d.tick.Timer, d.tick.Slot = e.t.name, d.permit.Slot()
	start := e.s.set.clock()
	runCtx := e.s.runCtx
	d.ctx = tickContext{Context: runCtx, tick: &d.tick}
	err := e.hold(&d.ctx, d.permit, d.lease, &d.tick)
	return e.finish(runCtx, d.tick, start, err)
}

// slotWorkers bounds the slot calls a scheduler makes at once: the calls
// of an instant's slots (takeSlots), or on a backend that cannot take
// them together, the attempts of single slots (takeSlot). 10,000 timers
// due at one instant would otherwise send 10,000 requests at once and
// hold every connection of the client's pool, so that the next instant's
// claims wait behind them.
const slotWorkers = 16

// slotsTogether says whether the backend takes many slots in one call
// (a lock.AnyEachAcquirer: memlock, redislock): then an instant takes its
// ticks' slots together. Elsewhere (etcdlock, pglock) that would be one
// request per slot anyway, and on pglock a slot holds a pooled connection
// until its run releases it: an instant that took every slot before it
// started any run would wait, with more ticks than connections, for
// connections that only its own runs can free.
func (s *Scheduler) slotsTogether() bool {
	_, ok := s.l.(lock.AnyEachAcquirer)
	return ok
}

// takeSlots takes a slot of each tick's timer for its lease (d.permit,
// or d.err) in one semaphore.TryAcquireEach (one round trip per chunk of
// the backend's), among at most slotWorkers calls at once; a call that
// cannot start before ctx ends fails every tick as a backend that does
// not answer (lock.ErrUnavailable).
func (s *Scheduler) takeSlots(ctx context.Context, ds []*due) {
	select {
	case s.slotGate <- struct{}{}:
	case <-ctx.Done():
		err := backendkit.Unavailable("timers: taking a slot", context.Cause(ctx))
		for _, d := range ds {
			d.err = err
		}
		return
	}
	defer func() { <-s.slotGate }()
	s.slotCalls.Add(1)
	reqs := make([]semaphore.SlotRequest, len(ds))
	for i, d := range ds {
		reqs[i] = semaphore.SlotRequest{Sem: d.e.sem, TTL: d.lease}
	}
	for i, r := range semaphore.TryAcquireEach(ctx, reqs) {
		ds[i].permit, ds[i].err = r.Permit, r.Err
	}
}

// takeSlot takes a slot of sem for ttl, among at most slotWorkers
// attempts at once; an attempt that cannot start before ctx ends fails as
// a backend that does not answer (lock.ErrUnavailable).
func (s *Scheduler) takeSlot(ctx context.Context, sem *semaphore.Semaphore, ttl time.Duration) (*semaphore.Permit, error) {
	select {
	case s.slotGate <- struct{}{}:
	case <-ctx.Done():
		return nil, backendkit.Unavailable("timers: taking a slot", context.Cause(ctx))
	}
	defer func() { <-s.slotGate }()
	s.slotCalls.Add(1)
	return sem.TryAcquire(ctx, ttl)
}
