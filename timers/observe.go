package timers

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/semaphore"
)

// Observed is what anyone can see of a timer through a backend's
// lock.Inspector: the claims and slot grants its schedulers make. It is
// the cluster-wide view; the outcome and duration of past runs are known
// only to the host that ran them (Scheduler.Status), because the lock
// contract has no shared store to publish them in.
type Observed struct {
	Name string
	// LastTick is the latest tick whose claim is still held (claims live
	// for the interval plus the misfire threshold); zero when none is.
	LastTick time.Time
	// ClaimedBy is the owner identity of the host that claimed LastTick,
	// and ClaimToken the claim's fencing token (TickFrom's Claim). With
	// WithRunsPerTick a tick has several claims: these are its first
	// held one's.
	ClaimedBy  string
	ClaimToken uint64
	// ClaimOwners lists the owners of every held claim of LastTick, in
	// the order of their keys: one, or with WithRunsPerTick(n) up to n
	// (the hosts that took the tick).
	ClaimOwners []string
	// Running lists the runs in progress: the held slots of the timer's
	// semaphore ("timer/<name>"), by slot.
	Running []Run
}

// Run is a run in progress, as its slot grant shows it.
type Run struct {
	Slot      int
	Runner    string        // owner identity of the host running it
	Token     uint64        // the slot grant's fencing token
	Since     time.Time     // when the slot was taken (zero if the backend does not record it)
	Remaining time.Duration // remaining ttl of the slot lease
}

// Observe reports every timer whose name starts with prefix and that has
// a tick claim or a run in progress, sorted by name, in two List calls
// (the claims under "timer/<prefix>", the slots under
// "sem/{timer/<prefix>"). It writes nothing. It needs a backend with
// lock.Inspector. A prefix other than "" follows the rule of timer names.
func Observe(ctx context.Context, l lock.Lock, prefix string) ([]Observed, error) {
	in, ok := l.(lock.Inspector)
	if !ok {
		return nil, backendkit.Invalid("timers", "Observe: the backend %T cannot list its grants", l)
	}
	if prefix != "" {
		if err := checkName("timer name prefix", prefix); err != nil {
			return nil, err
		}
	}
	claims, err := in.List(ctx, namePrefix+prefix)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Observed{}
	get := func(name string) *Observed {
		o := byName[name]
		if o == nil {
			o = &Observed{Name: name}
			byName[name] = o
		}
		return o
	}
	// List sorts by key: a tick's claims come in a row, the first (no
	// index) before the others ("/<i>").
	for _, g := range claims {
		name, at, ok := parseClaimKey(g.Key)
		if !ok {
			continue
		}
		switch o := get(name); {
		case at.After(o.LastTick):
			o.LastTick, o.ClaimedBy, o.ClaimToken, o.ClaimOwners = at, g.Owner, g.Token, []string{g.Owner}
		case at.Equal(o.LastTick):
			o.ClaimOwners = append(o.ClaimOwners, g.Owner)
		}
	}
	sems, err := semaphore.ObserveAll(ctx, l, namePrefix+prefix)
	if err != nil {
		return nil, err
	}
	for _, s := range sems {
		name, ok := strings.CutPrefix(s.Name, namePrefix)
		if !ok || len(s.Held) == 0 {
			continue
		}
		o := get(name)
		for _, h := range s.Held {
			o.Running = append(o.Running, Run{Slot: h.Slot, Runner: h.Grant.Owner, Token: h.Grant.Token, Since: h.Grant.Since, Remaining: h.Grant.Remaining})
		}
	}
	out := make([]Observed, 0, len(byName))
	for _, o := range byName {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseClaimKey reads claimKey's "timer/<name>/tick/<unix ms>[/<claim>]".
func parseClaimKey(key string) (name string, at time.Time, ok bool) {
	rest, found := strings.CutPrefix(key, namePrefix)
	i := strings.LastIndex(rest, "/tick/")
	if !found || i < 0 {
		return "", time.Time{}, false
	}
	tick := rest[i+len("/tick/"):]
	if j := strings.IndexByte(tick, '/'); j >= 0 {
		if _, err := strconv.ParseUint(tick[j+1:], 10, 16); err != nil {
			return "", time.Time{}, false
		}
		tick = tick[:j]
	}
	ms, err := strconv.ParseInt(tick, 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return rest[:i], time.UnixMilli(ms), true
}
