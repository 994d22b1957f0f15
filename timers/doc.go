// Package timers runs cron-style functions across a fleet: every host runs
// the same timers, and each tick runs once cluster-wide (or, with
// WithRunsPerTick(n), on up to n hosts, each on a slot of its own), with
// at most WithMaxConcurrency runs of a timer overlapping anywhere.
//
//	s, err := timers.New(l) // l: any lock.Lock shared by the fleet
//	err = s.Add(timers.Every("reports", time.Minute, sendReports, timers.WithMaxConcurrency(3)))
//	err = s.Add(timers.Cron("cleanup", "30 3 * * *", cleanup, timers.WithLocation(berlin)))
//	err = s.Run(ctx)
//
// Each tick has an identity that every host computes alike (Every: the
// Unix epoch plus multiples of the interval; Cron: the spec, in its time
// zone). The first host to claim a tick (lock.Claim) runs it, holding one of
// WithMaxConcurrency slots of a semaphore and renewing its lease (WithTTL);
// the other hosts see the tick taken. With WithRunsPerTick(n) a tick has n
// claims, so the first n hosts to claim one run it, and the timer has n
// slots unless WithMaxConcurrency gives more. How a tick runs, step by
// step, and what it costs: docs/timers.md.
//
// # Semantics
//
//	situation                        what happens
//	-------------------------------  ------------------------------------------------------------
//	hosts start at different times   same ticks everywhere (aligned to the epoch, or the spec)
//	clocks differ by d < interval/2  each tick runs at most once (WithRunsPerTick(n): n times, on
//	                                 n hosts): the claims outlive the last host to reach the tick
//	                                 (interval + threshold > 2d + threshold), however early the
//	                                 first runs ended
//	run longer than the interval     the next ticks run on free slots; with every slot busy
//	                                 they are skipped (reason busy), never queued
//	host down or paused at a tick    another host claims the tick; a host that wakes up later
//	                                 than the misfire threshold skips the ticks it missed
//	runner crashes mid-run           its slot frees when the slot lease expires (WithTTL); its
//	                                 claim stays: the tick is not run again (beyond n)
//	fn runs past WithMaxRunTime      its context ends at WithMaxRunTime; if it has not returned a
//	                                 grace later (a third of WithTTL), its slot is released while
//	                                 it still runs (logged at Warn): the next ticks can run; once
//	                                 it returns, the run counts as a failure, outcome "overran"
//	runner loses its slot lease      fn's context is cancelled (cause lock.ErrLost)
//	backend unreachable              the tick is skipped (reason unavailable, logged at Warn);
//	                                 with WithRunWhenUnavailable(n) it runs under a per-host cap
//	                                 of n, logged at Warn: once-per-tick and WithMaxConcurrency
//	                                 are suspended until it answers; the first tick that reaches
//	                                 it again logs (at Warn) that they hold again
//	backend stalls (no free pool     the claim and the slot are attempted until the next tick
//	connection, a hung request)      only (the earliest next tick of the timers due at that
//	                                 instant); then the tick is skipped (unavailable, or error)
//	                                 and the next one is on time
//	process shuts down (ctx ends)    no new ticks (a tick whose claim was in flight still runs:
//	                                 its claim keeps it from the other hosts); Run waits for
//	                                 running fns up to the shutdown timeout, then cancels their
//	                                 contexts, and returns when every slot is released
//	fn returns an error              retried within the tick (WithRetries), else counted
//	backend loses its grants         the tick's claim is lost too: a host that claims the tick
//	(Redis restart without           again within the misfire threshold runs it a second time;
//	persistence; PostgreSQL restart, claims that come back later are skipped (reason misfire).
//	or a reset of the claimer's      Slots are lost as with any grant: the runs learn it at their
//	connection)                      next renewal (fn's context, cause lock.ErrLost)
//
// The fencing token of a run's slot is in its context (lock.TokenFrom), and
// TickFrom gives the tick, including the claim's token, which grows with
// every tick of the timer: a resource can refuse the writes of a run of an
// older tick.
//
// Clock skew matters only through the claim: keep the hosts' clocks within
// a fraction of the shortest interval (NTP does it for intervals of
// seconds). On pglock a claim holds no connection: a timer holds one only
// while it runs.
//
// # Bad input
//
// New refuses a nil Lock and an invalid option of its own (WithClock,
// WithShutdownTimeout, WithCommon's Owner); Add refuses an invalid timer.
// Both say so with an error that matches lock.ErrInvalidArgument, starts
// with "timers: " and names the argument or the option:
//
//	input                                  rule
//	-------------------------------------  ------------------------------------------------------------
//	timer name                             backendkit.CheckName's rule, at most MaxNameLen (506) bytes, so
//	                                       that the semaphore name "timer/<name>" is a valid name and
//	                                       every claim and slot key is within lock.MaxKeyLen
//	Every interval, "@every D"             at least MinInterval (1 ms): a tick's claim key holds its
//	                                       instant in milliseconds
//	cron spec                              robfig/cron's standard syntax, with a tick to come ("0 0
//	                                       30 2 *" has none); "TZ=... @every D" is refused (the
//	                                       parser's @every is not aligned across hosts)
//	WithMaxRunTime, WithShutdownTimeout    positive, at most lock.MaxTTL
//	WithMaxConcurrency,                    in [1, 1024]; WithMaxConcurrency at least WithRunsPerTick
//	WithRunsPerTick
//	WithRetries(n, backoff)                n in [0, MaxRetries], backoff in [0, lock.MaxTTL]; the wait
//	                                       doubles up to lock.MaxTTL
//	WithMisfireThreshold                   positive, at most half the backend's maximum ttl
//	WithTTL                                at least 3 ms (renewed every third), within the backend's limits
//	                                       (lock.LimitsOf): lock.ErrInvalidTTL
//
// A schedule that runs out of ticks while it runs (none after the last that a time.Time holds)
// never spins: the timer stops, logs an error, and Status reports it in
// Stopped; the other timers go on.
//
// # Many timers
//
// One goroutine per Scheduler (the dispatcher, Run's own) keeps the timers
// in a heap by their next tick and wakes only when one is due: a timer
// that is not due costs nothing per tick. It wakes on a grain of 5 ms from
// the Unix epoch (less when a timer ticks more often than every 80 ms or
// has a WithMisfireThreshold under 20 ms: a sixteenth of the shortest
// interval, a quarter of the smallest threshold, none below 100 µs), so a
// tick on the grain (a whole second) starts at its instant and another
// at most one grain late, and the ticks of one grain go together. At each
// wake-up it takes every timer due by then and claims their ticks
// together, in one lock.ClaimEach call (one round trip per chunk of the
// backend's, per Cluster slot on Redis; on a backend that is not a
// lock.EachClaimer, one lock.Claim per tick, 16 at a time). With
// WithRunsPerTick(n), each timer's first choice among its n claims goes
// in that call; the timers whose choice was taken try their next one in a
// second call, and so on (n calls at most). The claimed ticks then take
// their slots: on a backend that takes many in one call
// (lock.AnyEachAcquirer: memlock, redislock) all of them in one
// semaphore.TryAcquireEach (one pipeline on Redis, a script per 32
// requests) before the runs start; elsewhere (etcdlock, pglock, where a
// slot holds a pooled connection until its run ends) each run takes its
// own slot (semaphore TryAcquire) and starts at once. At most 16 slot
// calls are in flight per scheduler, so that they do not hold every
// connection of the client's pool while the next claims wait; a call that
// cannot start before the earliest next tick among its ticks fails them as
// unavailable, and one still going then is cut short (its context ends).
// Each tick keeps its own outcome: it runs, or is skipped as busy (every
// slot held), unavailable or error. The runs of an instant go one after
// another on the instant's goroutine; those not started one wake grain (1
// to 5 ms) after the instant's runs began start each on a goroutine of
// their own (a pool that outlives them, no bound: as many as runs at
// once), so a run that blocks holds the others of its instant back by one
// grain at most. The runs' slot leases are kept by one lock.Keeper per
// lease ttl (renewed together, through the backend's lock.Batch, and
// released through the Keeper, which sends releases that arrive together
// in one lock.ReleaseEach), closed when Run returns. The sizes of the
// timers' semaphores (WithMaxConcurrency) are declared and compared with
// the other hosts' for all the timers together (semaphore.CheckSizes: one
// lock.ClaimEach and one listing) when Run starts and every 30 s; a timer
// whose hosts disagree skips its ticks (reason error) until they agree.
//
// Status reports, per timer, the next tick, this host's last run (its
// Runner is the scheduler's owner: WithCommon's Owner, else the Lock's) and
// its counts of runs, failures and skips; the same go to metrics.
package timers
