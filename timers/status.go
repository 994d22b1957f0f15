package timers

import (
	"context"
	"time"
)

// Tick identifies one run: the timer, the tick's instant (the same on every
// host), the claim's fencing token (it grows with every tick of the timer)
// and the slot the run holds (-1 for a WithRunWhenUnavailable run). The run's
// context carries the slot's fencing token for lock.TokenFrom as well.
type Tick struct {
	Timer string
	At    time.Time
	Claim uint64
	Slot  int
	Local bool // run under WithRunWhenUnavailable's per-host cap
}

type tickKey struct{}

// tickContext is a run's context carrying its tick (TickFrom), made in
// place in the run's due, so that a run costs no context allocation for
// it (10,000 runs a second at 10,000 timers).
type tickContext struct {
	context.Context
	tick *Tick
}

// Value answers the tick for TickFrom, and defers every other key to the
// parent.
func (c *tickContext) Value(key any) any {
	if key == (tickKey{}) {
		return c.tick
	}
	return c.Context.Value(key)
}

// TickFrom returns the tick a timer function runs for.
func TickFrom(ctx context.Context) (Tick, bool) {
	t, ok := ctx.Value(tickKey{}).(*Tick) // the run's own, not copied into an interface
	if !ok {
		return Tick{}, false
	}
	return *t, true
}

// Status is what this host knows of a timer.
type Status struct {
	Name      string
	Next      time.Time // the next tick
	LastRun   RunInfo   // this host's last run (zero when none)
	LastSkip  SkipInfo  // this host's last skipped tick
	Runs      int64     // runs on this host
	Failures  int64     // runs that returned an error, were cancelled, lost their slot or overran
	Skips     int64     // ticks this host reached but skipped (busy, misfire, unavailable)
	Elsewhere int64     // ticks other hosts had already claimed (every one of the n claims, with WithRunsPerTick(n))
	// Stopped says why the timer stopped scheduling, nil while it runs: a
	// schedule that ran out of ticks (none after the last that a Time can
	// hold), which is logged at Error. Next is zero then.
	Stopped error
}

// RunInfo describes one run.
type RunInfo struct {
	Tick     time.Time
	Start    time.Time
	Duration time.Duration
	Outcome  string // ok, error, cancelled (WithMaxRunTime, shutdown), lost (the slot lease), overran (WithMaxRunTime plus the grace)
	Err      error
	Runner   string // owner identity of the host that ran it
	Local    bool
}

// SkipInfo describes a skipped tick.
type SkipInfo struct {
	Tick   time.Time
	Reason string // busy, misfire, unavailable, error
}

// Status reports every registered timer, in registration order.
func (s *Scheduler) Status() []Status {
	s.mu.Lock()
	entries := make([]*entry, 0, len(s.order))
	for _, n := range s.order {
		entries = append(entries, s.timers[n])
	}
	s.mu.Unlock()
	out := make([]Status, len(entries))
	for i, e := range entries {
		e.mu.Lock()
		out[i] = e.status
		out[i].Name = e.t.name
		if out[i].Stopped == nil {
			if ns := e.nextTick.Load(); ns != 0 {
				out[i].Next = time.Unix(0, ns)
			} else {
				out[i].Next = e.t.schedule.next(e.s.set.clock())
			}
		}
		e.mu.Unlock()
	}
	return out
}

func (e *entry) record(f func(*Status)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.status)
}

// setNext records the timer's next tick for Status, without the entry's
// lock (the dispatcher sets it at every tick).
func (e *entry) setNext(at time.Time) { e.nextTick.Store(at.UnixNano()) }
