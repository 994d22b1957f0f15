package timers

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
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

	maxConcurrency int // 0 until set: then runsPerTick
	runsPerTick    int
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

// Limits of a timer's definition. Every duration an option takes is
// checked against them by the option, and against the backend's
// lock.Limits by Scheduler.Add; input outside them is refused with an
// error that matches lock.ErrInvalidArgument (lock.ErrInvalidTTL for a
// ttl) and names the option.
const (
	// MinInterval is the shortest interval of Every (and "@every"): a
	// tick's claim key holds its instant in milliseconds, so two ticks
	// closer than that would share one claim.
	MinInterval = time.Millisecond
	// MaxNameLen is the longest timer name, in bytes: lock.MaxNameLen less
	// the "timer/" that makes the name of the timer's semaphore, which
	// must itself be a valid name. Every key the scheduler derives from a
	// valid name (claims and slots) is then within lock.MaxKeyLen.
	MaxNameLen = lock.MaxNameLen - len(namePrefix)
	// MaxRetries is the most retries WithRetries takes.
	MaxRetries = 100
)

// namePrefix makes a timer's semaphore name and the prefix of its claim keys.
const namePrefix = "timer/"

// checkName is the rule for timer names (what says which argument:
// "timer name", or Observe's "timer name prefix"): backendkit.CheckName's, at
// most MaxNameLen bytes.
func checkName(what, name string) error {
	if err := backendkit.CheckName(what, name); err != nil {
		return backendkit.Invalid("timers", "%w", err)
	}
	if len(name) > MaxNameLen {
		return backendkit.Invalid("timers", "%s %.64q is %d bytes, the limit is %d", what, name, len(name), MaxNameLen)
	}
	return nil
}

// schedule yields tick times. next returns the first tick strictly after
// t, or the zero Time when there is none (none that a Time can hold).
type schedule interface {
	next(t time.Time) time.Time
}

// every ticks at the epoch plus phase plus multiples of the interval: the
// same instants on every host, whenever it started.
type every struct{ interval, phase time.Duration }

func (e every) next(t time.Time) time.Time {
	iv, ph := int64(e.interval), int64(e.phase) // 0 <= phase < interval
	ns := t.UnixNano() - ph
	k := ns / iv
	if ns < 0 && ns%iv != 0 {
		k-- // floor for times before the epoch
	}
	if k >= (math.MaxInt64-ph)/iv {
		return time.Time{} // (k+1)*interval + phase would overflow
	}
	return time.Unix(0, (k+1)*iv+ph)
}

// cronSchedule ticks by a cron spec in a location, shifted by a phase.
type cronSchedule struct {
	spec  cron.Schedule
	loc   *time.Location
	phase time.Duration
}

// cronSearch is how many of robfig/cron's five-year searches next makes
// before it concludes that a spec has no tick (29 February lies up to
// eight years apart; 30 February never comes).
const cronSearch = 5

func (c cronSchedule) next(t time.Time) time.Time {
	from := t.Add(-c.phase).In(c.loc)
	for range cronSearch {
		// The parser looks no more than five years ahead, so a zero
		// result means there is no tick within four years after from.
		if n := c.spec.Next(from); !n.IsZero() {
			return n.Add(c.phase)
		}
		from = from.AddDate(4, 0, 0)
	}
	return time.Time{}
}

// Every defines a timer that fires every interval, at instants aligned to
// the Unix epoch (plus the WithSpreadStart phase): every host computes the same
// ticks.
func Every(name string, interval time.Duration, fn func(ctx context.Context) error, opts ...Option) *Timer {
	t := &Timer{name: name, fn: fn, err: checkName("timer name", name)}
	if t.err == nil && interval < MinInterval {
		t.err = backendkit.Invalid("timers", "timer %q: interval %v is below the minimum %v (a tick's claim is keyed by the millisecond)", name, interval, MinInterval)
	}
	t.schedule = every{interval: max(interval, MinInterval)}
	return t.apply(opts)
}

// Cron defines a timer that fires by a standard 5-field cron spec or a
// descriptor (@hourly, @daily, ...), parsed by robfig/cron/v3, in the
// location given by WithLocation (default UTC). Daylight-saving changes
// follow that parser's rules: a time of day in the hour that is skipped
// (spring forward) does not fire that day; a time of day in the hour that
// is repeated (fall back) fires in both of its occurrences, an hour apart
// ("30 1 * * *" in America/New_York fires at 01:30 EDT and at 01:30 EST),
// each a tick of its own that runs once cluster-wide. A job that must run
// once a day whatever the zone does belongs outside 01:00–02:59 local
// time, or in UTC. "@every D" is the same as Every(name, D, ...).
func Cron(name, spec string, fn func(ctx context.Context) error, opts ...Option) *Timer {
	t := &Timer{name: name, fn: fn, loc: time.UTC, err: checkName("timer name", name)}
	if d, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		interval, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || interval <= 0 {
			t.withErr(backendkit.Invalid("timers", "timer %q: invalid cron spec %q", name, spec))
			interval = time.Second
		}
		return Every(name, interval, fn, opts...).withErr(t.err)
	}
	s, err := cron.ParseStandard(spec)
	if _, unaligned := s.(cron.ConstantDelaySchedule); err == nil && unaligned {
		// "TZ=... @every D": the parser's own @every counts from whenever
		// it is asked, so no two hosts would share a tick.
		err = errors.New("@every takes no time zone")
	}
	if err != nil {
		t.withErr(backendkit.Invalid("timers", "timer %q: invalid cron spec %q: %w", name, spec, err))
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
	t.runsPerTick = 1
	for _, o := range opts {
		if o == nil {
			t.err = errors.Join(t.err, backendkit.Invalid("timers", "timer %.64q: nil option", t.name))
			continue
		}
		if err := o(t); err != nil {
			t.err = errors.Join(t.err, backendkit.Invalid("timers", "timer %.64q: %w", t.name, err))
		}
	}
	if t.maxConcurrency == 0 {
		t.maxConcurrency = t.runsPerTick
	}
	if t.maxConcurrency < t.runsPerTick {
		t.err = errors.Join(t.err, backendkit.Invalid("timers", "timer %.64q: WithMaxConcurrency(%d) is below WithRunsPerTick(%d): a tick's runs could never all hold a slot",
			t.name, t.maxConcurrency, t.runsPerTick))
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

// WithMaxConcurrency caps the runs of this timer that overlap across every host
// (default 1, or WithRunsPerTick's n: no more runs at once than one tick
// has). A tick that finds all n slots busy is skipped and counted, never
// queued. With WithRunsPerTick(r), n is at least r.
func WithMaxConcurrency(n int) Option {
	return func(t *Timer) error {
		if n < 1 || n > maxSlots {
			return fmt.Errorf("WithMaxConcurrency(%d) must be in [1, %d]", n, maxSlots)
		}
		t.maxConcurrency = n
		return nil
	}
}

// maxSlots bounds WithMaxConcurrency and WithRunsPerTick.
const maxSlots = 1024

// WithRunsPerTick lets up to n hosts run each tick, each on a slot of its
// own: the model of the timer libraries where every host fires at each
// tick and a lock caps the runs cluster-wide. The default, 1, is once per
// tick cluster-wide.
//
// Each tick has n claims; a host that takes one of them runs the tick,
// and a host that finds all n taken counts the tick as Elsewhere. A claim
// outlives the latest host to reach the tick (as with one claim), so a
// tick runs at most n times however late or skewed a host is, even after
// its first runs have ended or their runner has crashed. The timer's slots
// (WithMaxConcurrency) default to n: never more than n runs at once across
// the hosts, whatever tick they are for; a larger WithMaxConcurrency lets
// runs of consecutive ticks overlap, a smaller one is refused. A tick
// whose run finds every slot busy is skipped (busy) on that host, as
// always. n is in [1, 1024].
func WithRunsPerTick(n int) Option {
	return func(t *Timer) error {
		if n < 1 || n > maxSlots {
			return fmt.Errorf("WithRunsPerTick(%d) must be in [1, %d]", n, maxSlots)
		}
		t.runsPerTick = n
		return nil
	}
}

// WithMaxRunTime is fn's deadline (retries included): fn's context ends
// at d. The run's slot lease is renewed for d plus a grace of one renewal
// period (a third of the slot's ttl, WithTTL) at most: a run still going
// then has overrun; its slot is released although fn has not returned (it
// no longer counts against WithMaxConcurrency), the overrun is logged at
// Warn, and the run, once fn returns, is counted with the outcome
// "overran" (Status, and the leasehold.timer.runs metric). Without it a run
// keeps its slot for as long as fn runs.
func WithMaxRunTime(d time.Duration) Option {
	return func(t *Timer) error {
		if d <= 0 || d > lock.MaxTTL {
			return fmt.Errorf("WithMaxRunTime(%v) must be positive and at most %v", d, lock.MaxTTL)
		}
		t.maxRunTime = d
		return nil
	}
}

// WithSpreadStart shifts the timer's ticks by a phase derived from its name,
// the same on every host, so that many timers do not all fire at :00.
func WithSpreadStart() Option { return func(t *Timer) error { t.spread = true; return nil } }

// WithRetries retries fn up to n more times within the same tick, while
// holding the slot and within WithMaxRunTime, waiting backoff, 2×backoff, ...
// in between (the wait stops doubling at lock.MaxTTL). n is at most
// MaxRetries and backoff at most lock.MaxTTL.
func WithRetries(n int, backoff time.Duration) Option {
	return func(t *Timer) error {
		if n < 0 || n > MaxRetries || backoff < 0 || backoff > lock.MaxTTL {
			return fmt.Errorf("WithRetries(%d, %v): n must be in [0, %d] and backoff in [0, %v]", n, backoff, MaxRetries, lock.MaxTTL)
		}
		t.retries, t.retryBackoff = n, backoff
		return nil
	}
}

// WithMisfireThreshold: a host that reaches a tick later than d (paused, busy,
// just started) skips it and counts a misfire (default: half the interval,
// at most a minute). Ticks stay once-only as long as the hosts' clocks
// differ by less than half the interval. d is at most half the backend's
// maximum ttl (lock.MaxTTL/2 at most; Add checks the backend's), since a
// tick's claim must outlive the threshold.
func WithMisfireThreshold(d time.Duration) Option {
	return func(t *Timer) error {
		if d <= 0 || d > lock.MaxTTL/2 {
			return fmt.Errorf("WithMisfireThreshold(%v) must be positive and at most %v", d, lock.MaxTTL/2)
		}
		t.misfire = d
		return nil
	}
}

// WithLocation sets the time zone of a Cron timer's spec (default UTC).
func WithLocation(loc *time.Location) Option {
	return func(t *Timer) error {
		if loc == nil {
			return errors.New("WithLocation(nil)")
		}
		if _, ok := t.schedule.(cronSchedule); !ok {
			return errors.New("WithLocation applies to Cron timers")
		}
		t.loc = loc
		return nil
	}
}

// minTTL is WithTTL's least ttl: a lease renewed every third of it must
// renew no more often than lock.MinRenewInterval (a shorter ttl was taken,
// and every run then failed before fn, its lease refused by the Keeper).
const minTTL = 3 * lock.MinRenewInterval

// WithTTL sets the ttl of a run's slot lease, renewed every third of it
// while fn runs: how long the slot of a crashed runner stays blocked
// (default: the interval, between 2 s and 30 s). d is at least minTTL
// (3 ms: its third, the renewal period, at least lock.MinRenewInterval)
// and within the backend's limits (lock.LimitsOf; Add checks them).
func WithTTL(d time.Duration) Option {
	return func(t *Timer) error {
		if d < minTTL || d > lock.MaxTTL {
			return fmt.Errorf("%w: WithTTL(%v) must be in [%v, %v]", lock.ErrInvalidTTL, d, minTTL, lock.MaxTTL)
		}
		t.leaseTTL = d
		return nil
	}
}

// WithRunWhenUnavailable opts in to running ticks when the backend cannot be
// reached, under a cap of n concurrent runs on this host instead of the
// cluster-wide one. Every such run is logged at Warn: the once-per-tick and
// WithMaxConcurrency guarantees are suspended until the backend answers again.
// Without it (the default) such ticks are skipped and counted.
func WithRunWhenUnavailable(n int) Option {
	return func(t *Timer) error {
		if n < 1 {
			return fmt.Errorf("WithRunWhenUnavailable(%d) must be at least 1", n)
		}
		t.fallback = n
		return nil
	}
}

// misfireFor is the misfire threshold of a tick followed by the next
// after iv (the schedule's next tick minus this one).
func (t *Timer) misfireFor(iv time.Duration) time.Duration {
	if t.misfire > 0 {
		return t.misfire
	}
	return min(iv/2, time.Minute)
}

// claimTTL is how long the claim of a tick followed by the next after iv
// lives: the interval plus the misfire threshold, within the backend's
// limits (a tick far from the next, such as 29 February's, keeps its
// claim for the backend's maximum ttl, which Add made at least twice the
// threshold).
func (t *Timer) claimTTL(iv time.Duration, lim lock.Limits) time.Duration {
	mf := t.misfireFor(iv)
	d := lim.MaxTTL
	if iv < lim.MaxTTL-mf {
		d = iv + mf
	}
	return max(d, lim.MinTTL)
}

// leaseFor is the slot lease of a tick followed by the next after iv:
// WithTTL, else the interval between 2 s and 30 s, within the backend's
// limits.
func (t *Timer) leaseFor(iv time.Duration, lim lock.Limits) time.Duration {
	if t.leaseTTL > 0 {
		return t.leaseTTL
	}
	return min(max(iv, 2*time.Second, lim.MinTTL), 30*time.Second, lim.MaxTTL)
}
