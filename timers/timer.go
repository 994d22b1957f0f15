package timers

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold-go/leasehold/lock"
)

// Timer is the definition of a timer: a name unique on its scheduler (and
// the same on every host that runs it), a schedule, a function and its
// options. Build one with Every or Cron and give it to Scheduler.Add, which
// reports any error in it.
type Timer struct {
	name     string
	fn       func(ctx context.Context) error
	schedule schedule
	err      error

	maxConcurrency int
	maxRunTime     time.Duration
	spread         bool
	retries        int
	retryBackoff   time.Duration
	misfire        time.Duration // 0: default
	loc            *time.Location
	leaseTTL       time.Duration // 0: default
	fallback       int           // > 0: run under a per-host cap when the backend is unreachable
}

// Option configures a timer.
type Option func(*Timer) error

// schedule yields tick times. next returns the first tick strictly after t.
type schedule interface {
	next(t time.Time) time.Time
}

// every ticks at the epoch plus phase plus multiples of the interval: the
// same instants on every host, whenever it started.
type every struct{ interval, phase time.Duration }

func (e every) next(t time.Time) time.Time {
	ns := t.UnixNano() - int64(e.phase)
	k := ns / int64(e.interval)
	if ns < 0 && ns%int64(e.interval) != 0 {
		k-- // floor for times before the epoch
	}
	return time.Unix(0, (k+1)*int64(e.interval)+int64(e.phase))
}

// cronSchedule ticks by a cron spec in a location, shifted by a phase.
type cronSchedule struct {
	spec  cron.Schedule
	loc   *time.Location
	phase time.Duration
}

func (c cronSchedule) next(t time.Time) time.Time {
	return c.spec.Next(t.Add(-c.phase).In(c.loc)).Add(c.phase)
}

// Every defines a timer that fires every interval, at instants aligned to
// the Unix epoch (plus the SpreadStart phase): every host computes the same
// ticks.
func Every(name string, interval time.Duration, fn func(ctx context.Context) error, opts ...Option) *Timer {
	t := &Timer{name: name, fn: fn}
	if interval <= 0 {
		t.err = fmt.Errorf("%w: timer %q: interval must be positive, got %v", lock.ErrInvalidArgument, name, interval)
	}
	t.schedule = every{interval: max(interval, 1)}
	return t.apply(opts)
}

// Cron defines a timer that fires by a standard 5-field cron spec or a
// descriptor (@hourly, @daily, ...), parsed by robfig/cron/v3, in the
// location given by InLocation (default UTC). Daylight-saving changes
// follow that parser's rules: a time of day in the hour that is skipped
// (spring forward) does not fire that day; a time of day in the hour that
// is repeated (fall back) fires in both of its occurrences, an hour apart
// ("30 1 * * *" in America/New_York fires at 01:30 EDT and at 01:30 EST),
// each a tick of its own that runs once cluster-wide. A job that must run
// once a day whatever the zone does belongs outside 01:00–02:59 local
// time, or in UTC. "@every D" is the same as Every(name, D, ...).
func Cron(name, spec string, fn func(ctx context.Context) error, opts ...Option) *Timer {
	t := &Timer{name: name, fn: fn, loc: time.UTC}
	if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		interval, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || interval <= 0 {
			t.err = fmt.Errorf("%w: timer %q: invalid cron spec %q", lock.ErrInvalidArgument, name, spec)
			interval = time.Second
		}
		return Every(name, interval, fn, opts...).withErr(t.err)
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		t.err = fmt.Errorf("%w: timer %q: invalid cron spec %q: %w", lock.ErrInvalidArgument, name, spec, err)
		s = cron.Every(time.Hour)
	}
	t.schedule = cronSchedule{spec: s, loc: time.UTC}
	return t.apply(opts)
}

func (t *Timer) withErr(err error) *Timer {
	if t.err == nil {
		t.err = err
	}
	return t
}

func (t *Timer) apply(opts []Option) *Timer {
	t.maxConcurrency = 1
	for _, o := range opts {
		if o == nil {
			t.err = errors.Join(t.err, fmt.Errorf("%w: timer %q: nil option", lock.ErrInvalidArgument, t.name))
			continue
		}
		if err := o(t); err != nil {
			t.err = errors.Join(t.err, fmt.Errorf("%w: timer %q: %w", lock.ErrInvalidArgument, t.name, err))
		}
	}
	if c, ok := t.schedule.(cronSchedule); ok && t.loc != nil {
		c.loc = t.loc
		t.schedule = c
	}
	if t.spread {
		t.schedule = t.withPhase(t.schedule)
	}
	return t
}

// withPhase shifts the schedule by a phase derived from the name: within
// the interval for Every, within a minute (and half the shortest gap) for
// Cron.
func (t *Timer) withPhase(s schedule) schedule {
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.name))
	sum := h.Sum64()
	switch s := s.(type) {
	case every:
		s.phase = time.Duration(sum % uint64(s.interval))
		return s
	case cronSchedule:
		span := min(time.Minute, shortestGap(s)/2)
		if span > 0 {
			s.phase = time.Duration(sum % uint64(span))
		}
		return s
	}
	return s
}

// shortestGap samples the gaps between a schedule's next ticks.
func shortestGap(s schedule) time.Duration {
	t := s.next(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	gap := time.Duration(1<<63 - 1)
	for range 16 {
		n := s.next(t)
		gap = min(gap, n.Sub(t))
		t = n
	}
	return gap
}

// MaxConcurrency caps the runs of this timer that overlap across every host
// (default 1: no overlap anywhere). A tick that finds all n slots busy is
// skipped and counted, never queued.
func MaxConcurrency(n int) Option {
	return func(t *Timer) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("MaxConcurrency(%d) must be in [1, 1024]", n)
		}
		t.maxConcurrency = n
		return nil
	}
}

// MaxRunTime is fn's deadline (retries included); the run's slot lease is
// kept alive up to it.
func MaxRunTime(d time.Duration) Option {
	return func(t *Timer) error {
		if d <= 0 {
			return fmt.Errorf("MaxRunTime(%v) must be positive", d)
		}
		t.maxRunTime = d
		return nil
	}
}

// SpreadStart shifts the timer's ticks by a phase derived from its name,
// the same on every host, so that many timers do not all fire at :00.
func SpreadStart() Option { return func(t *Timer) error { t.spread = true; return nil } }

// RetryOnError retries fn up to n more times within the same tick, while
// holding the slot and within MaxRunTime, waiting backoff, 2×backoff, ...
// in between.
func RetryOnError(n int, backoff time.Duration) Option {
	return func(t *Timer) error {
		if n < 0 || backoff < 0 {
			return fmt.Errorf("RetryOnError(%d, %v) must not be negative", n, backoff)
		}
		t.retries, t.retryBackoff = n, backoff
		return nil
	}
}

// MisfireThreshold: a host that reaches a tick later than d (paused, busy,
// just started) skips it and counts a misfire (default: half the interval,
// at most a minute). Ticks stay once-only as long as the hosts' clocks
// differ by less than half the interval.
func MisfireThreshold(d time.Duration) Option {
	return func(t *Timer) error {
		if d <= 0 {
			return fmt.Errorf("MisfireThreshold(%v) must be positive", d)
		}
		t.misfire = d
		return nil
	}
}

// InLocation sets the time zone of a Cron timer's spec (default UTC).
func InLocation(loc *time.Location) Option {
	return func(t *Timer) error {
		if loc == nil {
			return errors.New("InLocation(nil)")
		}
		if _, ok := t.schedule.(cronSchedule); !ok {
			return errors.New("InLocation applies to Cron timers")
		}
		t.loc = loc
		return nil
	}
}

// LeaseTTL sets the ttl of a run's slot lease, renewed every third of it
// while fn runs: how long the slot of a crashed runner stays blocked
// (default: the interval, between 2 s and 30 s).
func LeaseTTL(d time.Duration) Option {
	return func(t *Timer) error {
		if d <= 0 {
			return fmt.Errorf("LeaseTTL(%v) must be positive", d)
		}
		t.leaseTTL = d
		return nil
	}
}

// RunWhenUnavailable opts in to running ticks when the backend cannot be
// reached, under a cap of n concurrent runs on this host instead of the
// cluster-wide one. Every such run is logged at Warn: the once-per-tick and
// MaxConcurrency guarantees are suspended until the backend answers again.
// Without it (the default) such ticks are skipped and counted.
func RunWhenUnavailable(n int) Option {
	return func(t *Timer) error {
		if n < 1 {
			return fmt.Errorf("RunWhenUnavailable(%d) must be at least 1", n)
		}
		t.fallback = n
		return nil
	}
}

// interval is the gap after tick at, which bounds the claim and the
// misfire threshold.
func (t *Timer) interval(at time.Time) time.Duration {
	return t.schedule.next(at).Sub(at)
}

func (t *Timer) misfireAt(at time.Time) time.Duration {
	if t.misfire > 0 {
		return t.misfire
	}
	return min(t.interval(at)/2, time.Minute)
}

func (t *Timer) leaseFor(at time.Time) time.Duration {
	if t.leaseTTL > 0 {
		return t.leaseTTL
	}
	return min(max(t.interval(at), 2*time.Second), 30*time.Second)
}
