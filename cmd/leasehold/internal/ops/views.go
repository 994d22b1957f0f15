package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
	"github.com/leasehold-go/leasehold/timers"
)

// ErrNotFound: nothing held, no such job.
var ErrNotFound = errors.New("not found")

// Grant is a grant as the views show it. Durations are in milliseconds in
// JSON; Since is omitted when the backend does not record it.
type Grant struct {
	Key         string     `json:"key"`
	Owner       string     `json:"owner"`
	Token       uint64     `json:"token"`
	RemainingMS int64      `json:"remaining_ms"`
	Since       *time.Time `json:"since,omitempty"`
}

func grantOf(g lock.Grant) Grant {
	return Grant{Key: g.Key, Owner: g.Owner, Token: g.Token, RemainingMS: g.Remaining.Milliseconds(), Since: timePtr(g.Since)}
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
	out := make([]Grant, len(gs))
	for i, g := range gs {
		out[i] = grantOf(g)
	}
	return out, nil
}

// Slot is one slot of a semaphore.
type Slot struct {
	Slot  int    `json:"slot"`
	Held  bool   `json:"held"`
	Grant *Grant `json:"grant,omitempty"`
}

// Semaphore is a semaphore's occupancy. Size is 0 when unknown (no
// participant declared it recently and none was given).
type Semaphore struct {
	Name     string `json:"name"`
	Size     int    `json:"size"`
	Declared []int  `json:"declared_sizes"`
	Held     int    `json:"held"`
	Slots    []Slot `json:"slots"`
}

func semaphoreOf(o semaphore.Observation, size int) Semaphore {
	if size <= 0 {
		size = o.Size()
	}
	v := Semaphore{Name: o.Name, Size: size, Declared: append([]int{}, o.Sizes...), Held: len(o.Held), Slots: []Slot{}}
	for _, st := range o.Slots(size) {
		sl := Slot{Slot: st.Slot, Held: st.Held}
		if st.Held {
			g := grantOf(st.Grant)
			sl.Grant = &g
		}
		v.Slots = append(v.Slots, sl)
	}
	return v
}

// Semaphore reports the semaphore name; size ≤ 0 means the size the
// participants declared.
func (s *Source) Semaphore(ctx context.Context, name string, size int) (Semaphore, error) {
	o, err := semaphore.Observe(ctx, s.Lock, name)
	if err != nil {
		return Semaphore{}, err
	}
	return semaphoreOf(o, size), nil
}

// Semaphores reports every semaphore with a grant whose name starts with
// prefix.
func (s *Source) Semaphores(ctx context.Context, prefix string) ([]Semaphore, error) {
	all, err := semaphore.ObserveAll(ctx, s.Lock, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]Semaphore, len(all))
	for i, o := range all {
		out[i] = semaphoreOf(o, 0)
	}
	return out, nil
}

// Leader is an election's current leader.
type Leader struct {
	Name     string     `json:"name"`
	Identity string     `json:"identity"`
	Term     uint64     `json:"term"`
	Since    *time.Time `json:"since,omitempty"`
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
	return Leader{Name: name, Identity: t.Identity, Term: t.Term, Since: timePtr(t.Since)}, nil
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
		out[i] = Leader{Name: o.Name, Identity: o.Identity, Term: o.Term.Term, Since: timePtr(o.Since)}
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
	Owner          string    `json:"owner"`
	Attempt        int       `json:"attempt"`
	Deadline       time.Time `json:"deadline"`
	ExpiresInMS    int64     `json:"expires_in_ms"` // negative once expired
	HeartbeatAgeMS int64     `json:"heartbeat_age_ms"`
}

// DeadJob is a job in the dead set.
type DeadJob struct {
	ID      string    `json:"id"`
	Owner   string    `json:"owner"`
	Attempt int       `json:"attempt"`
	DiedAt  time.Time `json:"died_at"`
	Reason  string    `json:"reason"`
}

// Counts are a registry's counts.
type Counts struct {
	Tracked int64 `json:"tracked"` // in flight, expired ones included
	Expired int64 `json:"expired"`
	Dead    int64 `json:"dead"`
}

// Jobs is the state of a jobs registry.
type Jobs struct {
	Counts   Counts    `json:"counts"`
	InFlight []Job     `json:"in_flight"` // unexpired
	Expired  []Job     `json:"expired"`
	Dead     []DeadJob `json:"dead"`
}

// JobsState reports up to limit jobs of each kind.
func (s *Source) JobsState(ctx context.Context, limit int) (Jobs, error) {
	if s.Jobs == nil {
		return Jobs{}, s.JobsErr
	}
	c, err := s.Jobs.Counts(ctx)
	if err != nil {
		return Jobs{}, err
	}
	in, err := s.Jobs.InFlight(ctx, limit+int(c.Expired))
	if err != nil {
		return Jobs{}, err
	}
	dead, err := s.Jobs.Dead(ctx, limit)
	if err != nil {
		return Jobs{}, err
	}
	now := s.Now()
	v := Jobs{Counts: Counts(c), InFlight: []Job{}, Expired: []Job{}, Dead: []DeadJob{}}
	for _, j := range in {
		left := j.Deadline.Sub(now)
		row := Job{ID: j.ID, Owner: j.Owner, Attempt: j.Attempt, Deadline: j.Deadline.UTC(),
			ExpiresInMS: left.Milliseconds(), HeartbeatAgeMS: max(s.lease-left, 0).Milliseconds()}
		if left <= 0 {
			if len(v.Expired) < limit {
				v.Expired = append(v.Expired, row)
			}
		} else if len(v.InFlight) < limit {
			v.InFlight = append(v.InFlight, row)
		}
	}
	for _, d := range dead {
		v.Dead = append(v.Dead, DeadJob{ID: d.ID, Owner: d.Owner, Attempt: d.Attempt, DiedAt: d.DiedAt.UTC(), Reason: d.Reason})
	}
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
		return Job{}, err
	}
	return Job{ID: j.ID, Owner: j.Owner, Attempt: j.Attempt, Deadline: j.Deadline.UTC()}, nil
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
	return err
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
