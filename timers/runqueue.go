package timers

import (
	"sync"
	"sync/atomic"
	"time"
)

// The runs of an instant. Once an instant's ticks hold their slots, its
// goroutine runs them one after another (runQueues.run), and the
// dispatcher, at its next wake-up, starts those not started yet each on a
// goroutine of its own (sweep): a run that blocks holds the later runs of
// its instant back for at most one wake grain (runQueues.inline, 1 to
// 5 ms). A goroutine handed each run at once, woken on the other core and
// parked again, cost more than the runs themselves on memlock: 10,000
// timers a second took 210 ms of CPU a second so, about 120 ms with the
// runs of an instant on its goroutine. The dispatcher wakes for the runs
// only when it would not wake by their deadline anyway (it sleeps past it:
// sparse timers), poked by the instant.

// runQueue is one instant's runs, taken in turn by the instant's goroutine
// and, past deadline, by the dispatcher.
type runQueue struct {
	ds       []*due
	next     atomic.Int64
	deadline time.Time // from then on the dispatcher starts the rest
}

// take is the next run not started yet, nil when none is left.
func (q *runQueue) take() *due {
	if i := q.next.Add(1) - 1; i < int64(len(q.ds)) {
		return q.ds[i]
	}
	return nil
}

func (q *runQueue) drained() bool { return q.next.Load() >= int64(len(q.ds)) }

// runQueues are a Scheduler's instants' run queues, which its dispatcher
// watches.
type runQueues struct {
	pool   *pool         // where the runs not run in turn go
	inline time.Duration // how long an instant's runs go in turn: the wake grain, 1 ms at least
	wake   atomic.Int64  // when the dispatcher wakes next, Unix nanoseconds (its clock)
	poke   chan struct{} // wakes the dispatcher (buffered: one pending at most)

	mu     sync.Mutex
	queues []*runQueue
	closed bool // the dispatcher has returned: no sweep will come (fanOutAll)
}

func newRunQueues(p *pool) *runQueues { return &runQueues{pool: p, poke: make(chan struct{}, 1)} }

// run runs ds, the runs of one instant, on this goroutine, one after
// another until none is left or inlineBudget has passed, then starts the
// rest each on a goroutine of its own (the dispatcher does that past the
// queue's deadline, when a run blocks). Each is counted in runs.
func (rq *runQueues) run(runs *sync.WaitGroup, ds []*due, now time.Time) {
	if len(ds) == 0 {
		return
	}
	q := &runQueue{ds: ds, deadline: now.Add(rq.inline)}
	if len(ds) > 1 {
		rq.mu.Lock()
		if rq.closed {
			// No dispatcher will start the runs a blocked one holds
			// back (at shutdown, an instant whose slots came back after
			// ctx ended): each starts at once.
			rq.mu.Unlock()
			for _, d := range ds {
				rq.pool.Go(runs, d)
			}
			return
		}
		rq.queues = append(rq.queues, q)
		rq.mu.Unlock()
		// The dispatcher stored its wake-up time before it last swept
		// the queues: either that sweep saw q, or this load sees the
		// time it sleeps until.
		if rq.wake.Load() > q.deadline.UnixNano() {
			select {
			case rq.poke <- struct{}{}:
			default:
			}
		}
	}
	for d := q.take(); d != nil; d = q.take() {
		runs.Add(1)
		end := d.runTick()
		runs.Done()
		if end.Sub(now) > inlineBudget {
			// Slow runs (a round trip each, on a networked backend):
			// the rest start at once, each on a goroutine of its own.
			for d := q.take(); d != nil; d = q.take() {
				rq.pool.Go(runs, d)
			}
		}
	}
}

// inlineBudget is how long an instant's goroutine runs its runs in turn
// before it starts the rest each on a goroutine of its own: runs that
// return at once (fn, the slot's release on memlock) all go in turn; runs
// that take a round trip each do not wait a grain for the dispatcher.
const inlineBudget = time.Millisecond

// sweep drops the drained queues and starts the runs of those past their
// deadline each on a goroutine of the pool, counted in runs; it returns the
// earliest deadline of the queues left (zero when none is).
func (rq *runQueues) sweep(runs *sync.WaitGroup, now time.Time) (next time.Time) {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	kept := rq.queues[:0]
	for _, q := range rq.queues {
		if !q.drained() && !now.Before(q.deadline) {
			for d := q.take(); d != nil; d = q.take() {
				rq.pool.Go(runs, d)
			}
		}
		if q.drained() {
			continue
		}
		kept = append(kept, q)
		if next.IsZero() || q.deadline.Before(next) {
			next = q.deadline
		}
	}
	clear(rq.queues[len(kept):])
	rq.queues = kept
	return next
}

// fanOutAll starts every run not started yet, each on a goroutine of the
// pool, and those of the instants queued later at once (run): the
// dispatcher's last act.
func (rq *runQueues) fanOutAll(runs *sync.WaitGroup) {
	rq.mu.Lock()
	defer rq.mu.Unlock()
	rq.closed = true
	for _, q := range rq.queues {
		for d := q.take(); d != nil; d = q.take() {
			rq.pool.Go(runs, d)
		}
	}
	rq.queues = nil
}
