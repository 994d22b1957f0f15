package timers

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
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

// tickHeap orders the timers by their next tick (entry.next), kept in
// Unix nanoseconds beside each entry so that ordering them reads the
// heap's array only.
type tickHeap []heapItem

type heapItem struct {
	at int64 // e.next in Unix nanoseconds
	e  *entry
}

func (h tickHeap) Len() int           { return len(h) }
func (h tickHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h tickHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *tickHeap) Push(x any)        { *h = append(*h, x.(heapItem)) }
func (h *tickHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = heapItem{}
	*h = old[:len(old)-1]
	return it
}

// due is one tick taken by the dispatcher, with its claim's outcome.
type due struct {
	e        *entry
	at, next time.Time // the tick and the timer's next one
	first    int       // WithRunsPerTick: the claim tried first
	claim    uint64
	err      error
}

// dispatch runs the dispatcher until ctx ends, then waits until every
// instant it handed off has started its runs (or given up).
func (s *Scheduler) dispatch(ctx, runCtx context.Context, runs *sync.WaitGroup, entries []*entry) {
	clock := s.set.clock
	h := make(tickHeap, 0, len(entries))
	now := clock()
	for _, e := range entries {
		if at := e.t.schedule.next(now); at.After(now) {
			e.next = at
			e.setNext(at)
			h = append(h, heapItem{at.UnixNano(), e})
		} else {
			e.stop(now)
		}
	}
	heap.Init(&h)
	var instants sync.WaitGroup
	defer instants.Wait()
	wait := time.NewTimer(time.Hour)
	defer wait.Stop()
	for len(h) > 0 {
		if !sleepUntil(ctx, wait, h[0].e.next, clock) {
			return
		}
		s.wakeups.Add(1)
		now := clock()
		var ticks []*due
		for len(h) > 0 && !h[0].e.next.After(now) {
			e := h[0].e
			at := e.next
			next := e.t.schedule.next(at)
			switch {
			case !next.After(at):
				// Defensive: Add refused a schedule with no tick to come,
				// but one can still run out (a tick a Time cannot hold);
				// nothing would bound tick at's claim, and a tick that
				// does not advance would spin: the timer stops.
				heap.Pop(&h)
				e.stop(at)
				continue
			case now.Sub(at) > e.t.misfireAt(at):
				e.skip(ctx, at, "misfire", fmt.Sprintf("reached %v late", now.Sub(at).Round(time.Millisecond)))
				if next = e.t.schedule.next(now); !next.After(now) {
					heap.Pop(&h)
					e.stop(now)
					continue
				}
			default:
				ticks = append(ticks, &due{e: e, at: at, next: next})
			}
			e.next, h[0].at = next, next.UnixNano()
			heap.Fix(&h, 0)
			e.setNext(next)
		}
		if len(ticks) > 0 {
			instants.Go(func() { s.runInstant(ctx, runCtx, runs, ticks) })
		}
	}
	<-ctx.Done() // every timer stopped
}

// sleepUntil waits on t until clock reads at; false when ctx ended first.
func sleepUntil(ctx context.Context, t *time.Timer, at time.Time, clock func() time.Time) bool {
	for {
		d := at.Sub(clock())
		if d <= 0 {
			return ctx.Err() == nil
		}
		t.Reset(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// runInstant claims the ticks due at one instant together, then takes a
// slot and starts a run for each claimed one. The attempts (the claims
// and the slots) end by the earliest next tick among them, so that a
// backend that stalls (a pool with no free connection, a hung request)
// costs this instant only, not the timers' later ones. (A claim that
// comes back after the misfire threshold is skipped; a slow attempt is
// not cut short at the threshold, since a connection being opened is
// worth keeping.)
func (s *Scheduler) runInstant(ctx, runCtx context.Context, runs *sync.WaitGroup, ticks []*due) {
	until := ticks[0].next
	for _, d := range ticks[1:] {
		if d.next.Before(until) {
			until = d.next
		}
	}
	attempt, cancel := context.WithTimeout(ctx, until.Sub(s.set.clock()))
	defer cancel()
	s.claim(attempt, ticks)
	var slots sync.WaitGroup
	for _, d := range ticks {
		d.e.claimed(ctx, runCtx, attempt, runs, &slots, d)
	}
	slots.Wait() // attempt must outlive the slots' attempts
}

// claim takes one claim of each tick: in one lock.ClaimEach for all of
// them (one round trip per chunk on an EachClaimer). With
// WithRunsPerTick(n) a tick has n claims; each host tries them from a
// random one on so that the hosts spread over them: the first choices of
// every tick go in one call, then the ticks whose choice was taken try
// their next claim in the next call, and so on, n calls at most.
func (s *Scheduler) claim(ctx context.Context, ticks []*due) {
	pending := make([]*due, 0, len(ticks))
	for _, d := range ticks {
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
			reqs = append(reqs, lock.ClaimRequest{Key: d.e.claimKey(d.at, (d.first+round)%t.runsPerTick), TTL: t.claimTTL(d.at, s.lim)})
		}
		res := s.claimEach(ctx, reqs)
		rest := pending[:0]
		for i, d := range pending {
			d.claim, d.err = res[i].Token, res[i].Err
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
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(reqs), claimWorkers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(reqs); i = int(next.Add(1) - 1) {
				res[i].Token, res[i].Err = lock.Claim(ctx, s.l, reqs[i].Key, reqs[i].TTL)
			}
		})
	}
	wg.Wait()
	return res
}

// claimed goes on with a tick whose claim has come back: counted
// elsewhere, skipped, run under the per-host cap, or, when it was
// granted, a run that takes a slot (with attempt, which slots tracks) and
// holds it while fn runs.
func (e *entry) claimed(ctx, runCtx, attempt context.Context, runs, slots *sync.WaitGroup, d *due) {
	at, err := d.at, d.err
	if err == nil || errors.Is(err, lock.ErrNotAcquired) {
		e.reachable(at)
	}
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		e.record(func(st *Status) { st.Elsewhere++ })
		return
	case errors.Is(err, lock.ErrUnavailable):
		e.unavailable(ctx, runCtx, runs, at, err)
		return
	case err != nil:
		e.skip(ctx, at, "error", err.Error())
		return
	}
	// The claim proves the tick unclaimed only if it was granted while the
	// earlier claims of this tick were still alive, and they live from at
	// least at to at + interval + threshold: a grant that came back after
	// the threshold (a request held up in the network, retried by the
	// client) may have outlived them, and another host may have run it.
	if late := e.s.set.clock().Sub(at); late > e.t.misfireAt(at) {
		e.skip(ctx, at, "misfire", fmt.Sprintf("the claim came back %v late", late.Round(time.Millisecond)))
		return
	}
	e.mu.Lock()
	mismatch := e.mismatch
	e.mu.Unlock()
	if mismatch != nil {
		e.skip(ctx, at, "error", mismatch.Error())
		return
	}
	slots.Add(1)
	runs.Go(func() {
		lease := e.t.leaseFor(at, e.s.lim)
		permit, err := e.s.takeSlot(attempt, e.sem, lease)
		slots.Done()
		switch {
		case errors.Is(err, lock.ErrNotAcquired):
			e.skip(ctx, at, "busy", fmt.Sprintf("all %d slots busy", e.t.maxConcurrency))
			return
		case errors.Is(err, lock.ErrUnavailable):
			e.unavailable(ctx, runCtx, runs, at, err)
			return
		case err != nil:
			e.skip(ctx, at, "error", err.Error())
			return
		}
		tick := Tick{Timer: e.t.name, At: at, Claim: d.claim, Slot: permit.Slot()}
		start := e.s.set.clock()
		err = e.hold(runCtx, permit, lease, tick)
		e.finish(runCtx, tick, start, err)
	})
}

// slotWorkers bounds the slot attempts a scheduler makes at once: 10,000
// timers due at one instant would otherwise send 10,000 requests at once
// and hold every connection of the client's pool, so that the next
// instant's claims wait behind them.
const slotWorkers = 16

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
	return sem.TryAcquire(ctx, ttl)
}
