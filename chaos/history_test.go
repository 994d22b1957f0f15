package chaos_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"
)

// grant is one grant as a worker saw it: from the reply of the acquire
// (after the real grant) to the end of its validity as the worker knew it
// (the last ValidUntil, the loss signal, or the start of its release,
// whichever came first): the real grant covers at least that interval.
type grant struct {
	Worker     int
	Key        string
	Token      uint64
	Start      time.Time
	End        time.Time // the earliest of ValidUntil, LossAt and the start of the release
	LossSeen   bool      // the worker's lease context reported the loss
	LossAt     time.Time // when it did
	ValidUntil time.Time // the lease's last ValidUntil
	Release    string    // ok, lost, error, or unobserved (a timer run: the scheduler releases its slot)
	ReleaseEnd time.Time // when Release returned
	Stalled    bool      // the nemesis stalled this holder past its ttl
	Tick       time.Time // the timers workload: the tick this run was for
	// Kept: the worker kept the grant with lock.Keep, and ValidUntil is
	// its lease's (the lock and semaphore workloads).
	Kept bool
	// Shared: a shared grant (the reader-writer workload), which may
	// overlap other shared grants of its key, never an exclusive one.
	Shared bool
}

// write is one write a worker sent to the fenced resource.
type write struct {
	Worker   int
	Key      string
	Token    uint64
	At       time.Time
	Accepted bool
	Stalled  bool // sent after a stall, without checking the lease
}

type history struct {
	mu      sync.Mutex
	Seed    int64
	Backend string
	Faults  []string
	Grants  []grant
	Writes  []write
	Limit   int   // grants allowed at once across the keys (a semaphore's size; 1 for a lock)
	Cuts    []cut // connection faults, per worker
	// ResetFrees: a connection reset frees the holder's grant at the
	// server at once (pglock).
	ResetFrees bool
	Relaxed    []string    // documented exceptions in force for this run
	Losses     []time.Time // restarts that lost every grant: when each began (Redis without persistence)
	// LossesEnd[i] is when restart i had returned (the server had gone
	// down and was up again), where known: the grants were lost at some
	// instant between Losses[i] and LossesEnd[i].
	LossesEnd []time.Time
	Interval  time.Duration // the timers workload: the timer's interval
	PerTick   int           // the timers workload: runs allowed per tick (WithRunsPerTick; 0 means 1)
	Begin     time.Time     // the nemesis started
	Finish    time.Time     // the nemesis stopped
	Jobs      *ledger       // the jobs workload
	// Failovers are the failovers of the server's primary (Kind crash or
	// handover, Worker -1), from the fault to the topology being whole
	// again. A failover excuses no overlap, no token out of order, no
	// tick run twice and no job lost: that is what it is there to test.
	Failovers []cut
	// Quarantines: the server forgets every grant at a restart (Losses)
	// and at a failover (PostgreSQL's advisory locks are in memory, not
	// replicated), but grants none of their keys again before the lost
	// holders' ValidUntil (pglock's quarantine of a new server
	// incarnation). So neither excuses an overlap; either explains a
	// Release that found its grant gone; a grant held across a whole
	// failover must have been told (its lease's loss, or ErrLost at
	// Release), as across a restart. Claims, tokens and jobs are not
	// forgotten.
	Quarantines bool
	// TTL is the workloads' ttl, the longest they grant: how long after a
	// failover a lost release can keep a slot taken, and where the server
	// Quarantines, how long it grants nothing.
	TTL time.Duration
	// Partitions are the group cuts: each cut a group of workers (a cut
	// each in Cuts, Kind partition) off from the server at once.
	Partitions []partition
	// Isolations are the times the nemesis cut a cluster's leader member
	// off from its peers (Worker: the member; Kind isolate). They excuse
	// nothing: the clients kept talking to every member.
	Isolations []cut
	// Told counts the kept grants whose holders were cut off at their
	// ValidUntil, still holding, and told by their lease in time.
	Told int

	held map[int]time.Time // the workers holding a grant now, and when each means to stop
}

// partition is one group cut.
type partition struct {
	Workers  []int
	From, To time.Time
}

// partitioned records a group cut, and a cut for each of its workers.
func (h *history) partitioned(workers []int, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Partitions = append(h.Partitions, partition{workers, from, to})
	for _, w := range workers {
		h.Cuts = append(h.Cuts, cut{w, "partition", from, to})
	}
}

// isolated records that member was cut off from its peers from from to to.
func (h *history) isolated(member int, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Isolations = append(h.Isolations, cut{member, "isolate", from, to})
}

// lostDuring counts the grants whose holders were told of a loss while a
// member was isolated or within ttl of its healing.
func (h *history) lostDuring(cuts []cut, ttl time.Duration) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, g := range h.Grants {
		for _, c := range cuts {
			if g.LossSeen && !g.LossAt.Before(c.From) && !g.LossAt.After(c.To.Add(ttl)) {
				n++
				break
			}
		}
	}
	return n
}

// holding records that worker holds a grant and means to keep it until
// until (its planned hold; the lease may end it sooner), or with the zero
// time that it has begun to release it.
func (h *history) holding(worker int, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[int]time.Time{}
	}
	if until.IsZero() {
		delete(h.held, worker)
		return
	}
	h.held[worker] = until
}

// holders returns the workers holding a grant now.
func (h *history) holders() []int { return h.holdersPast(time.Time{}) }

// holdersPast returns the workers holding a grant now that mean to hold
// it past t.
func (h *history) holdersPast(t time.Time) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ws []int
	for w, until := range h.held {
		if until.After(t) {
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	return ws
}

// cut is a connection fault of one worker's client, from From to To.
type cut struct {
	Worker   int
	Kind     string // blackhole, partition (a group of workers cut off at once), reset
	From, To time.Time
}

// toldWithin is how late after its ValidUntil a holder cut off from the
// server may learn of its loss: the lease's own timer, late by the
// scheduler (chaos.TestHalfOpenHolder allows the same).
const toldWithin = 100 * time.Millisecond

// cutOffAt returns the cut that silenced g's worker's connections (a
// blackhole, or a partition of a group of workers) at the instant at, if
// one did: no renewal could get through then.
func (h *history) cutOffAt(g grant, at time.Time) (cut, bool) {
	for _, c := range h.Cuts {
		if c.Worker == g.Worker && (c.Kind == "blackhole" || c.Kind == "partition") && !at.Before(c.From) && !at.After(c.To) {
			return c, true
		}
	}
	return cut{}, false
}

// checkTold holds a kept grant whose holder was cut off from the server at
// its last ValidUntil, and still held it then (it had not begun its
// release), to the lease's promise: the loss is told by ValidUntil (the
// lease's context is cancelled with ErrLost), not later, whatever the
// connection does. A stalled holder stopped its own renewals.
func (h *history) checkTold(g grant) []string {
	switch {
	case !g.Kept || g.Stalled:
		return nil
	case g.LossSeen && g.LossAt.Before(g.ValidUntil): // told before
		return nil
	case g.End.Before(g.ValidUntil): // released before
		return nil
	}
	c, ok := h.cutOffAt(g, g.ValidUntil)
	if !ok {
		return nil
	}
	if g.LossSeen && !g.LossAt.After(g.ValidUntil.Add(toldWithin)) {
		h.Told++
		return nil
	}
	switch {
	case !g.LossSeen:
		return []string{fmt.Sprintf("loss not told: worker %d token %d, cut off (%s from %s to %s) at its ValidUntil %s, was never told by its lease",
			g.Worker, g.Token, c.Kind, ts(c.From), ts(c.To), ts(g.ValidUntil))}
	case g.LossAt.After(g.ValidUntil.Add(toldWithin)):
		return []string{fmt.Sprintf("loss told late: worker %d token %d, cut off (%s from %s to %s) at its ValidUntil %s, was told at %s",
			g.Worker, g.Token, c.Kind, ts(c.From), ts(c.To), ts(g.ValidUntil), ts(g.LossAt))}
	}
	return nil
}

func (h *history) cut(worker int, kind string, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Cuts = append(h.Cuts, cut{worker, kind, from, to})
}

// freedAt is when a reset of its worker's connection freed g at the server
// (ResetFrees backends), or the zero time.
func (h *history) freedAt(g grant) time.Time {
	if !h.ResetFrees {
		return time.Time{}
	}
	for _, c := range h.Cuts {
		if c.Worker == g.Worker && c.Kind == "reset" && c.From.After(g.Start) && c.From.Before(g.End) {
			return c.From
		}
	}
	return time.Time{}
}

// ambiguous reports whether a fault of g's worker's connection overlapped
// its release: a client that retries (go-redis does) may then report a
// release that took effect as lost.
func (h *history) ambiguous(g grant) bool {
	for _, c := range h.Cuts {
		if c.Worker == g.Worker && !c.To.Before(g.End) && !c.From.After(g.ReleaseEnd) {
			return true
		}
	}
	return false
}

// restarted records a server restart; when it loses the grants, the
// grants it cut short are exempt from the overlap check, but their holders
// must have been told (the lease's loss signal, or ErrLost at Release).
func (h *history) restarted(at time.Time, losesGrants bool) {
	if !losesGrants {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Losses = append(h.Losses, at)
	h.Relaxed = append(h.Relaxed, "grants lost by a restart at "+ts(at))
}

// restartDone records when the restart begun at Losses[len-1] returned.
func (h *history) restartDone(at time.Time, losesGrants bool) {
	if !losesGrants {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.LossesEnd = append(h.LossesEnd, at)
}

// lossEnds returns when each restart that lost the grants returned, or
// when it began where that is not known (h.mu held).
func (h *history) lossEnds() []time.Time {
	ends := make([]time.Time, len(h.Losses))
	for i, from := range h.Losses {
		ends[i] = from
		if i < len(h.LossesEnd) {
			ends[i] = h.LossesEnd[i]
		}
	}
	return ends
}

// spansRestart reports whether g's interval holds a whole restart that
// lost the grants (begun after g started, returned before g ended): the
// grant was surely lost while its holder used it. A restart that overlaps
// g only in part may have taken the server down after g's Release (seed
// 726664, TestNemesisSemaphore/postgres: the restart began 2 ms before the
// work ended, and the Release was answered before the server stopped).
func (h *history) spansRestart(g grant) bool {
	for i, from := range h.Losses {
		to := from
		if i < len(h.LossesEnd) {
			to = h.LossesEnd[i]
		}
		if from.After(g.Start) && to.Before(g.End) {
			return true
		}
	}
	return false
}

// checkLimit sweeps the grants' intervals across all keys: never more than
// h.Limit at once (a semaphore's size), except across a restart that lost
// the grants.
func (h *history) checkLimit(gs []grant) []string {
	limit := max(h.Limit, 1)
	type edge struct {
		at  time.Time
		d   int
		cut bool
	}
	var edges []edge
	for _, g := range gs {
		cut := h.cutByRestart(g)
		edges = append(edges, edge{g.Start, 1, cut}, edge{g.End, -1, cut})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].d < edges[j].d
		}
		return edges[i].at.Before(edges[j].at)
	})
	n, exempt := 0, 0
	for _, e := range edges {
		n += e.d
		if e.cut {
			exempt += e.d
		}
		if n-exempt > limit {
			return []string{fmt.Sprintf("limit: %d grants valid at once at %s, the limit is %d", n-exempt, ts(e.at), limit)}
		}
	}
	return nil
}

// cutByRestart reports whether a restart that lost the grants may have
// taken the server down while g was held: the restart, from its start to
// its return, overlaps g's interval.
func (h *history) cutByRestart(g grant) bool {
	if h.Quarantines {
		return false
	}
	for i, from := range h.Losses {
		to := from
		if i < len(h.LossesEnd) {
			to = h.LossesEnd[i]
		}
		if from.Before(g.End) && to.After(g.Start) { // the server went down at some instant in [from, to]
			return true
		}
	}
	return false
}

// lostBetween reports whether a restart that lost the grants, or a failover
// that forgot them (Quarantines), fell between from and to.
func (h *history) lostBetween(from, to time.Time) bool {
	for _, at := range h.Losses {
		if at.After(from) && at.Before(to) {
			return true
		}
	}
	for _, f := range h.Failovers { // the primary stopped at some instant in [f.From, f.To]
		if h.Quarantines && f.From.Before(to) && f.To.After(from) {
			return true
		}
	}
	return false
}

// failedOver records a failover of the server's primary, begun at from
// and whole again at to.
func (h *history) failedOver(how string, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Failovers = append(h.Failovers, cut{Worker: -1, Kind: how, From: from, To: to})
}

// failoverWithin returns a failover that forgot every grant (Quarantines)
// and lay wholly within g's interval, if one did: g was surely lost.
func (h *history) failoverWithin(g grant) (cut, bool) {
	for _, f := range h.Failovers {
		if h.Quarantines && f.From.After(g.Start) && f.To.Before(g.End) {
			return f, true
		}
	}
	return cut{}, false
}

// duringOutage reports whether at fell during a failover or a restart
// that lost the grants, or within the grace after it: the second in which
// the clients find the server again, and a ttl in which a quarantining
// server grants nothing (and a release the outage lost keeps its key).
// A restart's end is when it returned, or its start where that is not
// known.
func (h *history) duringOutage(at time.Time) bool {
	grace := time.Second + h.TTL
	for _, f := range h.Failovers {
		if !at.Before(f.From) && !at.After(f.To.Add(grace)) {
			return true
		}
	}
	for i, end := range h.lossEnds() {
		if !at.Before(h.Losses[i]) && !at.After(end.Add(grace)) {
			return true
		}
	}
	return false
}

func (h *history) fault(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Faults = append(h.Faults, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

func (h *history) addGrant(g grant) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Grants = append(h.Grants, g)
}

func (h *history) addWrite(w write) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Writes = append(h.Writes, w)
}

// save writes the history where a failing run can be replayed from.
func (h *history) save() string {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("leasehold-chaos-%s-%d.json", h.Backend, h.Seed))
	b, _ := json.MarshalIndent(h, "", "  ")
	_ = os.WriteFile(path, b, 0o644)
	return path
}

// check returns every violation of the contract in the history.
//
//   - Grant safety and conservative validity: no two grants' intervals
//     overlap (the workers' intervals lie inside the real grants), except
//     two shared grants'.
//   - Fencing: between grants in time order, tokens strictly increase
//     (a shared grant's only above the earlier exclusive grants': shares
//     granted at once may reply in any order).
//   - Loss reported: no worker that was not stalled wrote outside its
//     grant's interval, and a grant whose interval ended before its
//     release saw the loss.
//   - Fenced writes: every write the resource accepted came from a grant
//     with the highest token yet, or from a holder within its interval.
//
// A restart that loses the grants (Redis without persistence) exempts the
// grants it cut short from the overlap checks, unless the server
// quarantines their keys (Quarantines, PostgreSQL). A failover exempts no
// overlap; where it forgets the grants (Quarantines), their holders must
// have been told.
func (h *history) check() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var bad []string
	h.Told = 0
	gs := append([]grant(nil), h.Grants...)
	for i, g := range gs {
		if at := h.freedAt(g); !at.IsZero() {
			if !g.LossSeen && g.Release != "lost" && g.Release != "unobserved" {
				bad = append(bad, fmt.Sprintf("loss not reported: worker %d token %d was freed by a connection reset at %s and never told", g.Worker, g.Token, ts(at)))
			}
			gs[i].End = at // the server freed it then; later writes are fenced ones
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].Start.Before(gs[j].Start) })
	bad = append(bad, h.checkLimit(exclusive(gs))...)
	// Of each key, so far: the grant that ends last (all, and exclusive
	// ones), and the one with the largest token (all, and exclusive ones).
	longest, longestExcl := map[string]grant{}, map[string]grant{}
	top, topExcl := map[string]grant{}, map[string]grant{}
	for _, cur := range gs {
		// An exclusive grant overlaps no earlier grant; a shared one no
		// earlier exclusive grant.
		l, seen := longest[cur.Key]
		if cur.Shared {
			l, seen = longestExcl[cur.Key]
		}
		if seen && cur.Start.Before(l.End) && !h.cutByRestart(l) {
			bad = append(bad, fmt.Sprintf("grant safety: worker %d token %d [%s, %s] overlaps worker %d token %d [%s, %s]",
				l.Worker, l.Token, ts(l.Start), ts(l.End), cur.Worker, cur.Token, ts(cur.Start), ts(cur.End)))
		}
		prev, seen := top[cur.Key]
		if cur.Shared {
			prev, seen = topExcl[cur.Key]
		}
		if seen && cur.Token <= prev.Token {
			bad = append(bad, fmt.Sprintf("fencing: token %d granted at %s after token %d at %s", cur.Token, ts(cur.Start), prev.Token, ts(prev.Start)))
		}
		if e, ok := longest[cur.Key]; !ok || cur.End.After(e.End) {
			longest[cur.Key] = cur
		}
		if t, ok := top[cur.Key]; !ok || cur.Token > t.Token {
			top[cur.Key] = cur
		}
		if !cur.Shared {
			if e, ok := longestExcl[cur.Key]; !ok || cur.End.After(e.End) {
				longestExcl[cur.Key] = cur
			}
			if t, ok := topExcl[cur.Key]; !ok || cur.Token > t.Token {
				topExcl[cur.Key] = cur
			}
		}
	}
	type keyToken struct {
		key   string
		token uint64
	}
	byToken := map[keyToken]grant{}
	for _, g := range gs {
		byToken[keyToken{g.Key, g.Token}] = g
		// A restart between the grant and the return of its Release (also
		// after the work ended, while the Release was on its way) explains
		// a Release that found the grant gone.
		if g.Release == "lost" && g.ReleaseEnd.Before(g.ValidUntil) && !g.LossSeen && !g.Stalled && !h.lostBetween(g.Start, g.ReleaseEnd) &&
			h.freedAt(g).IsZero() && !h.ambiguous(g) {
			bad = append(bad, fmt.Sprintf("validity not conservative: worker %d token %d was gone when its Release returned, before its ValidUntil, and no loss was reported", g.Worker, g.Token))
		}
		if f, ok := h.failoverWithin(g); ok && !g.LossSeen && g.Release != "lost" && g.Release != "unobserved" {
			bad = append(bad, fmt.Sprintf("loss not reported: worker %d token %d was held across the %s failover at %s, which forgot every grant, and was never told", g.Worker, g.Token, f.Kind, ts(f.From)))
		}
		bad = append(bad, h.checkTold(g)...)
		if h.spansRestart(g) && !g.LossSeen && g.Release != "lost" && g.Release != "unobserved" {
			bad = append(bad, fmt.Sprintf("loss not reported: worker %d token %d outlived a restart that lost the grants, and was never told", g.Worker, g.Token))
		}
	}
	for _, w := range h.Writes {
		g, ok := byToken[keyToken{w.Key, w.Token}]
		if !ok {
			bad = append(bad, fmt.Sprintf("write by worker %d with token %d, which was never granted", w.Worker, w.Token))
			continue
		}
		freed := h.freedAt(h.grantOf(w))
		if !w.Stalled && (w.At.Before(g.Start) || w.At.After(g.End)) && (freed.IsZero() || w.At.Before(freed)) {
			bad = append(bad, fmt.Sprintf("write outside the grant: worker %d token %d at %s, grant [%s, %s]", w.Worker, w.Token, ts(w.At), ts(g.Start), ts(g.End)))
		}
	}
	return bad
}

// exclusive returns the grants of gs that are not shared: the ones the
// limit counts.
func exclusive(gs []grant) []grant {
	var out []grant
	for _, g := range gs {
		if !g.Shared {
			out = append(out, g)
		}
	}
	return out
}

// overlaps measures the grant-safety violations of the history: the
// overlaps of each grant with the grants of its key that began before it
// and were still valid (as their holders saw it), their count, total and
// longest length. The failover runs without replica acks report them.
func (h *history) overlaps() (n int, total, longest time.Duration) {
	h.mu.Lock()
	gs := append([]grant(nil), h.Grants...)
	h.mu.Unlock()
	sort.Slice(gs, func(i, j int) bool { return gs[i].Start.Before(gs[j].Start) })
	end := map[string]time.Time{} // of each key, the latest end so far
	for _, g := range gs {
		if e, ok := end[g.Key]; ok && g.Start.Before(e) {
			if g.End.Before(e) {
				e = g.End
			}
			d := e.Sub(g.Start)
			n, total, longest = n+1, total+d, max(longest, d)
		}
		if g.End.After(end[g.Key]) {
			end[g.Key] = g.End
		}
	}
	return n, total, longest
}

// grantOf finds the grant a write was made under (h.mu held).
func (h *history) grantOf(w write) grant {
	for _, g := range h.Grants {
		if g.Key == w.Key && g.Token == w.Token {
			return g
		}
	}
	return grant{}
}

func ts(t time.Time) string { return t.Format("15:04:05.000000") }
