package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/semaphore"
	"github.com/leasehold-go/leasehold/timers"
)

// ErrNotFound: nothing held, no such job.
var ErrNotFound = errors.New("not found")

// Grant is a grant as the views show it. Durations are in milliseconds in
// JSON; Since is omitted when the backend does not record it.
//
// A key held shared (lock.SharedLock) is one Grant for all its shares:
// Shares counts them, Owners lists their owners, and the rest describes
// the share that expires first. Group names the all-of grant
// (lock.GroupLock) a grant belongs to.
type Grant struct {
	Key         string     `json:"key"`
	KeyBase64   string     `json:"key_base64,omitempty"` // the key's bytes when it is not valid UTF-8
	Owner       string     `json:"owner"`
	Token       uint64     `json:"token"`
	RemainingMS int64      `json:"remaining_ms"`
	Since       *time.Time `json:"since,omitempty"`
	Shares      int        `json:"shares,omitempty"`
	Owners      []string   `json:"owners,omitempty"`
	Group       string     `json:"group,omitempty"`
}

func grantOf(g lock.Grant) Grant {
	v := Grant{Key: g.Key, KeyBase64: Base64(g.Key), Owner: g.Owner, Token: g.Token, RemainingMS: g.Remaining.Milliseconds(),
		Since: timePtr(g.Since), Group: g.Group}
	if g.Shared {
		v.Shares, v.Owners = 1, []string{g.Owner}
	}
	return v
}

// Holder is who holds the grant, as a table shows it: the owner, or for a
// key held shared the number of shares and their owners.
func (g Grant) Holder() string {
	if g.Shares == 0 {
		return g.Owner
	}
	return fmt.Sprintf("%d shared: %s", g.Shares, strings.Join(g.Owners, ", "))
}

// foldShares makes one Grant of the shares of each key (gs sorted by key,
// as lock.Inspector's List returns them): their count, their distinct
// owners in order, and the share that expires first.
func foldShares(gs []lock.Grant) []Grant {
	out := make([]Grant, 0, len(gs))
	for _, g := range gs {
		v := grantOf(g)
		if n := len(out); n > 0 && g.Shared && out[n-1].Shares > 0 && out[n-1].Key == g.Key {
			last := &out[n-1]
			if !slices.Contains(last.Owners, g.Owner) {
				last.Owners = append(last.Owners, g.Owner)
			}
			shares, owners := last.Shares+1, last.Owners
			if v.RemainingMS < last.RemainingMS {
				*last = v
			}
			last.Shares, last.Owners = shares, owners
			continue
		}
		out = append(out, v)
	}
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func inspector(l lock.Lock) (lock.Inspector, error) {
	in, ok := l.(lock.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: the backend %T cannot list its grants", lock.ErrInvalidArgument, l)
	}
	return in, nil
}

// jobsInspector returns reg's operator view, or an error matching
// lock.ErrInvalidArgument (as inspector's) when reg has none.
func jobsInspector(reg jobs.Registry) (jobs.Inspector, error) {
	in, ok := reg.(jobs.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: the jobs registry %T cannot list its jobs (it is no jobs.Inspector)", lock.ErrInvalidArgument, reg)
	}
	return in, nil
}

// Locks lists the grants of the keys that start with prefix.
func (s *Source) Locks(ctx context.Context, prefix string) ([]Grant, error) {
	in, err := inspector(s.Lock)
	if err != nil {
		return nil, err
	}
	gs, err := in.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return foldShares(gs), nil
}

// Slot is one slot of a semaphore.
type Slot struct {
	Slot  int    `json:"slot"`
	Held  bool   `json:"held"`
	Grant *Grant `json:"grant,omitempty"`
}

// Semaphore is a semaphore's occupancy. Size is 0 when unknown (no
// participant declared it recently and none was given). Sizes and slot
// numbers are read from keys any client can write: a declared size or a
// slot outside 1…semaphore.MaxSize is not used, only counted in Ignored.
type Semaphore struct {
	Name     string `json:"name"`
	Size     int    `json:"size"`
	Declared []int  `json:"declared_sizes"`
	Held     int    `json:"held"`
	Slots    []Slot `json:"slots"`
	Ignored  int    `json:"ignored_keys,omitempty"` // size markers and slots out of range
}

// CheckSize reports whether size is a semaphore size an operator may
// pass (1…semaphore.MaxSize); 0 stands for "the declared size".
func CheckSize(size int) error {
	if size < 0 || size > semaphore.MaxSize {
		return fmt.Errorf("%w: semaphore size %d must be in [1, %d]", lock.ErrInvalidArgument, size, semaphore.MaxSize)
	}
	return nil
}

// semaphoreOf is the view of o, with size slots (0: the size observed).
// It never allocates by a size or slot number read from the backend
// beyond semaphore.MaxSize.
func semaphoreOf(o semaphore.Observation, size int) Semaphore {
	v := Semaphore{Name: o.Name, Declared: []int{}, Slots: []Slot{}, Ignored: o.Ignored}
	observed := 0
	for _, n := range o.Sizes {
		if n < 1 || n > semaphore.MaxSize {
			v.Ignored++
			continue
		}
		v.Declared = append(v.Declared, n)
		observed = max(observed, n)
	}
	var held []semaphore.SlotState
	for _, st := range o.Held {
		if st.Slot < 0 || st.Slot >= semaphore.MaxSize {
			v.Ignored++
			continue
		}
		held = append(held, st)
		observed = max(observed, st.Slot+1)
	}
	if size <= 0 || size > semaphore.MaxSize {
		size = observed
	}
	v.Size, v.Held = size, len(held)
	v.Slots = make([]Slot, size, size+len(held))
	for i := range v.Slots {
		v.Slots[i].Slot = i
	}
	for _, st := range held {
		g := grantOf(st.Grant)
		sl := Slot{Slot: st.Slot, Held: true, Grant: &g}
		if st.Slot < size {
			v.Slots[st.Slot] = sl
		} else {
			v.Slots = append(v.Slots, sl) // held above the given size
		}
	}
	return v
}

// Semaphore reports the semaphore name; size 0 means the size the
// participants declared.
func (s *Source) Semaphore(ctx context.Context, name string, size int) (Semaphore, error) {
	if err := backendkit.CheckName("semaphore name", name); err != nil {
		return Semaphore{}, err
	}
	if err := CheckSize(size); err != nil {
		return Semaphore{}, err
	}
	o, err := semaphore.Observe(ctx, s.Lock, name)
	if err != nil {
		return Semaphore{}, err
	}
	return semaphoreOf(o, size), nil
}

// Semaphores reports the first limit semaphores (by name) with a grant
// whose name starts with prefix, and how many there are: only those listed
// are laid out slot by slot (each up to semaphore.MaxSize slots).
func (s *Source) Semaphores(ctx context.Context, prefix string, limit int) ([]Semaphore, int, error) {
	all, err := semaphore.ObserveAll(ctx, s.Lock, prefix)
	if err != nil {
		return nil, 0, err
	}
	out := make([]Semaphore, min(len(all), max(limit, 0)))
	for i := range out {
		out[i] = semaphoreOf(all[i], 0)
	}
	return out, len(all), nil
}

// Leader is an election's current leader.
type Leader struct {
	Name  string     `json:"name"`
	Owner string     `json:"owner"`
	Term  uint64     `json:"term"`
	Since *time.Time `json:"since,omitempty"`
}

// Leader reports the leader of name, or ErrNotFound.
func (s *Source) Leader(ctx context.Context, name string) (Leader, error) {
	t, ok, err := leader.Observe(ctx, s.Lock, name)
	if err != nil {
		return Leader{}, err
	}
	if !ok {
		return Leader{}, fmt.Errorf("%w: no leader of %q (no process campaigns, or the backend's key prefix differs)", ErrNotFound, name)
	}
	return Leader{Name: name, Owner: t.Owner, Term: t.Term, Since: timePtr(t.Since)}, nil
}

// Leaders reports the leaders of the elections whose name starts with
// prefix.
func (s *Source) Leaders(ctx context.Context, prefix string) ([]Leader, error) {
	all, err := leader.ObserveAll(ctx, s.Lock, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]Leader, len(all))
	for i, o := range all {
		out[i] = Leader{Name: o.Name, Owner: o.Owner, Term: o.Term.Term, Since: timePtr(o.Since)}
	}
	return out, nil
}

// Timer is a timer as timers.Observe sees it.
type Timer struct {
	Name       string     `json:"name"`
	LastTick   *time.Time `json:"last_tick,omitempty"`
	ClaimedBy  string     `json:"claimed_by,omitempty"`
	ClaimToken uint64     `json:"claim_token,omitempty"`
	Running    []Run      `json:"running"`
}

// Run is a timer run in progress.
type Run struct {
	Slot        int        `json:"slot"`
	Runner      string     `json:"runner"`
	Token       uint64     `json:"token"`
	Since       *time.Time `json:"since,omitempty"`
	RemainingMS int64      `json:"remaining_ms"`
}

// Timers reports the timers whose name starts with prefix.
func (s *Source) Timers(ctx context.Context, prefix string) ([]Timer, error) {
	obs, err := timers.Observe(ctx, s.Lock, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]Timer, len(obs))
	for i, o := range obs {
		t := Timer{Name: o.Name, LastTick: timePtr(o.LastTick), ClaimedBy: o.ClaimedBy, ClaimToken: o.ClaimToken, Running: []Run{}}
		for _, r := range o.Running {
			t.Running = append(t.Running, Run{Slot: r.Slot, Runner: r.Runner, Token: r.Token, Since: timePtr(r.Since), RemainingMS: r.Remaining.Milliseconds()})
		}
		out[i] = t
	}
	return out, nil
}

// Job is a job in flight. HeartbeatAgeMS is the time since its last
// heartbeat, assuming the application's job lease is the configured one
// (Config.Lease): the registry stores deadlines, not heartbeat times.
type Job struct {
	ID             string    `json:"id"`
	IDBase64       string    `json:"id_base64,omitempty"` // the ID's bytes when it is not valid UTF-8
	Owner          string    `json:"owner"`
	Attempt        int       `json:"attempt"`
	Deadline       time.Time `json:"deadline"`
	ExpiresInMS    int64     `json:"expires_in_ms"` // negative once expired
	HeartbeatAgeMS int64     `json:"heartbeat_age_ms"`
}

// DeadJob is a job in the dead set.
type DeadJob struct {
	ID       string    `json:"id"`
	IDBase64 string    `json:"id_base64,omitempty"` // the ID's bytes when it is not valid UTF-8
	Owner    string    `json:"owner"`
	Attempt  int       `json:"attempt"`
	DiedAt   time.Time `json:"died_at"`
	Reason   string    `json:"reason"`
}

// Counts are a registry's counts.
type Counts struct {
	Tracked int64 `json:"tracked"` // in flight, expired ones included
	Expired int64 `json:"expired"`
	Dead    int64 `json:"dead"`
}

// Jobs is the state of a jobs registry: the counts, and the first jobs
// of each kind (a bounded number: the *More fields count the others).
// Payloads are never listed.
type Jobs struct {
	Counts       Counts    `json:"counts"`
	InFlight     []Job     `json:"in_flight"` // unexpired
	InFlightMore int64     `json:"in_flight_more"`
	Expired      []Job     `json:"expired"`
	ExpiredMore  int64     `json:"expired_more"`
	Dead         []DeadJob `json:"dead"`
	DeadMore     int64     `json:"dead_more"`
}

// MaxLimit is the most jobs of each kind, and rows of a table, a view
// lists.
const MaxLimit = 1000

// CheckLimit reports whether limit is within 1…MaxLimit.
func CheckLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("%w: limit %d must be in [1, %d]", lock.ErrInvalidArgument, limit, MaxLimit)
	}
	return nil
}

// JobsState reports the counts and up to limit jobs of each kind
// (1…MaxLimit) in three bounded calls of the registry's jobs.Inspector,
// none of which moves a payload (its listings are payload-free):
// Counts, Dead(limit), and InFlight of limit jobs, plus the expired ones
// when fewer than limit have expired (at most 2×limit−1 rows). InFlight
// lists by deadline, the expired jobs first: when limit or more have
// expired, the view lists limit of them and counts the unexpired ones
// only. It never calls Expired, which lists payloads for the recovery
// scan.
//
// A listed job counts as expired by its own deadline against s.Now, the
// clock its ExpiresInMS is measured on, rather than by position (the
// first Counts.Expired rows): the counts and the listing are two calls,
// and a job done, reclaimed or expiring between them would shift the
// split, so that a row could be labelled expired while it shows time
// left, or the reverse. By deadline each row's label agrees with its own
// numbers; only the *More counts come from Counts.
//
// A registry that is no jobs.Inspector cannot be listed: an error matching
// lock.ErrInvalidArgument says so (Retry and Purge still work on it).
func (s *Source) JobsState(ctx context.Context, limit int) (Jobs, error) {
	if s.Jobs == nil {
		return Jobs{}, s.JobsErr
	}
	if err := CheckLimit(limit); err != nil {
		return Jobs{}, err
	}
	view, err := jobsInspector(s.Jobs)
	if err != nil {
		return Jobs{}, err
	}
	c, err := view.Counts(ctx)
	if err != nil {
		return Jobs{}, s.jobsErr(err)
	}
	n := limit
	if c.Expired < int64(limit) {
		n += int(max(c.Expired, 0)) // room for limit unexpired jobs after them
	}
	in, err := view.InFlight(ctx, n)
	if err != nil {
		return Jobs{}, s.jobsErr(err)
	}
	dead, err := view.Dead(ctx, limit)
	if err != nil {
		return Jobs{}, s.jobsErr(err)
	}
	now := s.Now()
	v := Jobs{Counts: Counts(c), InFlight: []Job{}, Expired: []Job{}, Dead: []DeadJob{}}
	row := func(j jobs.Job) Job {
		left := j.Deadline.Sub(now)
		return Job{ID: j.ID, IDBase64: Base64(j.ID), Owner: j.Owner, Attempt: j.Attempt, Deadline: j.Deadline.UTC(),
			ExpiresInMS: left.Milliseconds(), HeartbeatAgeMS: max(s.lease-left, 0).Milliseconds()}
	}
	for _, j := range in {
		switch {
		case j.Deadline.After(now):
			if len(v.InFlight) < limit {
				v.InFlight = append(v.InFlight, row(j))
			}
		case len(v.Expired) < limit:
			v.Expired = append(v.Expired, row(j))
		}
	}
	for _, d := range dead {
		v.Dead = append(v.Dead, DeadJob{ID: d.ID, IDBase64: Base64(d.ID), Owner: d.Owner, Attempt: d.Attempt, DiedAt: d.DiedAt.UTC(), Reason: d.Reason})
	}
	v.InFlightMore = max(c.Tracked-c.Expired-int64(len(v.InFlight)), 0)
	v.ExpiredMore = max(c.Expired-int64(len(v.Expired)), 0)
	v.DeadMore = max(c.Dead-int64(len(v.Dead)), 0)
	return v, nil
}

// Retry puts the dead job id back in flight (jobs.Revive): the
// application's recovery scan requeues it.
func (s *Source) Retry(ctx context.Context, id string) (Job, error) {
	if s.Jobs == nil {
		return Job{}, s.JobsErr
	}
	j, err := jobs.Revive(ctx, s.Jobs, id, s.owner)
	if errors.Is(err, jobs.ErrNotFound) {
		return Job{}, fmt.Errorf("%w: no dead job %q (list them with: leasehold jobs)", ErrNotFound, id)
	}
	if err != nil {
		return Job{}, s.jobsErr(err)
	}
	return Job{ID: j.ID, IDBase64: Base64(j.ID), Owner: j.Owner, Attempt: j.Attempt, Deadline: j.Deadline.UTC()}, nil
}

// Purge deletes the dead job id for good.
func (s *Source) Purge(ctx context.Context, id string) error {
	if s.Jobs == nil {
		return s.JobsErr
	}
	err := s.Jobs.Purge(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		return fmt.Errorf("%w: no dead job %q (list them with: leasehold jobs)", ErrNotFound, id)
	}
	return s.jobsErr(err)
}

// Holder reports key's current grant, or ErrNotFound.
func (s *Source) Holder(ctx context.Context, key string) (Grant, error) {
	in, err := inspector(s.Lock)
	if err != nil {
		return Grant{}, err
	}
	g, ok, err := in.Inspect(ctx, key)
	if err != nil {
		return Grant{}, err
	}
	if !ok {
		return Grant{}, fmt.Errorf("%w: %q is not held", ErrNotFound, key)
	}
	if g.Shared { // every share of key, folded into one
		gs, err := in.List(ctx, key)
		if err != nil {
			return Grant{}, err
		}
		gs = slices.DeleteFunc(gs, func(o lock.Grant) bool { return o.Key != key || !o.Shared })
		if len(gs) > 0 {
			return foldShares(gs)[0], nil
		}
	}
	return grantOf(g), nil
}

// ForceRelease removes key's grant whoever holds it, or returns
// ErrNotFound when it was not held.
func (s *Source) ForceRelease(ctx context.Context, key string) error {
	f, ok := s.Lock.(interface {
		ForceRelease(ctx context.Context, key string) (bool, error)
	})
	if !ok {
		return fmt.Errorf("%w: the backend %T cannot force a release", lock.ErrInvalidArgument, s.Lock)
	}
	removed, err := f.ForceRelease(ctx, key)
	if err != nil {
		return err
	}
	if !removed {
		return fmt.Errorf("%w: %q is not held", ErrNotFound, key)
	}
	return nil
}
