// Package jobs recovers work that a crashed worker left "in progress": a
// job whose worker stopped heartbeating is requeued within seconds, never
// lost, and finding it costs in proportion to the jobs that expired, not to
// the jobs tracked.
//
// # How it works
//
// Workers Track each job they start in a durable Registry (jobs/redisjobs,
// jobs/pgjobs; jobs/memjobs in process) with a deadline on the registry's
// clock. From Track on, one batched heartbeat per runner per interval
// extends all of its jobs and reports the ones it no longer owns, whose
// contexts are then cancelled. redisjobs and pgjobs send it in chunks
// (scripts of 100 jobs, two in flight; statements of 200, one pipeline),
// so that no server call grows with the jobs in flight; a chunk that fails
// leaves its jobs valid until their lease ends (HeartbeatError). Track starts that loop
// and it ends with the last job in flight: a worker needs no other call to
// keep its jobs (Run is the recovery side, below). When a worker finishes it calls done, which
// removes the entry only if its epoch still matches: the late completion of
// a zombie (paused past its lease, its job since recovered) is rejected with
// ErrStale. Done is idempotent per epoch: a Done retried after its first
// attempt took effect (a lost reply) returns nil, for DoneWindow; and done,
// called again after an error of unknown outcome (an outage), calls it
// again.
//
// # Input
//
// Job IDs are opaque keys (1 to lock.MaxKeyLen bytes, any bytes, NUL
// included); owners, the runner's among them, are identities
// (backendkit.CheckOwner); the election name (WithElection) follows
// backendkit.CheckName; ttls are 1 ms to lock.MaxTTL (WithTTL's more than
// 5.05 ms, and within the election lock's limits), and every interval of
// NewRunner at most lock.MaxTTL. Bad input is refused where it is passed with an error that
// matches lock.ErrInvalidArgument, starts with "jobs: " and names it.
//
// The full shape is a worker that Tracks its jobs and, in one or more
// processes, Runner.Run (see the Runner.Track example). Run campaigns in a
// leader.Run election on the lock you pass; one process at a time, its
// leader, scans every scan interval (WithScanInterval) for expired
// entries through the registry's deadline index (cost grows with the
// expired count, not the tracked count) and, for each one:
//
//  1. reclaims it: atomically, only if it is still expired and of the same
//     epoch, it gets a new epoch, Attempt+1 and a history entry;
//  2. after WithMaxRetries recoveries, buries it in the dead set (OnDead
//     runs), else calls your Requeue with a delay: base·2^(attempt−1),
//     capped (WithRetryBackoff), drawn below that schedule by
//     WithRetryJitter — full jitter (uniform in [0, schedule]) by default,
//     the exact schedule with 0, at most 20 % below it with 0.2;
//  3. removes the entry.
//
// Over a registry that is a BatchRecoverer (memjobs, redisjobs, pgjobs)
// the expired entries of one scan are reclaimed, and removed, in chunks
// of RecoveryChunk: one ReclaimEach and one RemoveEach a chunk, each one
// round trip of wall time (a pipeline of one-job calls), and the jobs of
// a chunk are buried or requeued one after another, or up to
// WithRecoveryConcurrency's count at once (Requeue, OnStep and OnDead are
// then called from that many goroutines). Over any other registry each step is one call for one job,
// so recovering n jobs takes about 3·n round trips in turn, and a
// concurrency of c divides that wall time by about c. 1,000 jobs of a
// server 1 ms away: 50 ms (Redis) and 0.19 s (PostgreSQL) in chunks,
// 2.4 and 2.6 s one at a time (BenchmarkScanRecovery).
//
// A crash at any point leaves the job either tracked (it expires again and
// is recovered again) or requeued: never lost. A duplicate is possible — a
// recoverer that dies between 2 and 3 requeues the job again — and Attempt
// and Epoch let handlers detect it. A recoverer that dies in the middle of
// a chunk has reclaimed the whole chunk: each of its jobs counts that
// recovery (Attempt+1) when the next recoverer takes it, and those it had
// requeued are requeued again (RecoveryChunk). A scan cut short (its
// context ended) still removes the jobs it requeued, each Remove for at
// most a second more. Recoveries are counted apart from
// ordinary failures: a job that keeps killing its workers ("poison") ends
// in the dead set, where it can be retried (RetryDead, Revive) or purged.
// The registry keeps the count by job ID (Registry.Track, RetryWindow): a
// job tracked again as Job{ID, Payload} from a queue goes on counting, and
// Job.MaxRetries overrides WithMaxRetries for one job.
//
// A Registry is the recovery protocol alone. Inspector is the operator's
// optional view of one, as lock.Inspector is of a backend: counts and
// listings without payloads, for the leasehold CLI and dashboard.
// memjobs, redisjobs and pgjobs implement both.
//
// # Owner, logs, metrics and traces
//
// WithCommon sets the runner's lock.Common. Its Owner is honoured: it is
// the runner's owner (Runner.Owner), recorded with the jobs it tracks and
// as the recoverer of the jobs it recovers; it defaults to the Lock's
// owner (backendkit.OwnerOf), or a new one (lock.NewOwner) when the Lock states
// none. The recovery election (leader.Run) is given the runner's Logger,
// MeterProvider and TracerProvider but not its Owner: a term's owner is
// the one its grant is stored with.
//
// # Timing
//
// Defaults: a ttl of 15 s (WithTTL: how long a job stays owned without a
// heartbeat), a heartbeat every ttl/4 (WithHeartbeatInterval), a scan
// every ttl/3 (WithScanInterval): a crashed worker's jobs are requeued
// about 20 s after its last heartbeat. WithTTL alone scales both intervals
// (WithTTL(2*time.Second): a heartbeat every 500 ms, a scan every 667 ms,
// recovery in under 3 s); a set interval wins. The heartbeat interval must
// stay below a third of the ttl less its drift allowance
// (backendkit.DriftAllowance: ttl/100 + 2 ms, which a job's context does
// not live) so that two heartbeats can fail without losing the jobs. A worker that cannot heartbeat cancels its jobs'
// contexts when their lease ends by its own clock, before anyone can
// reclaim them.
//
// # Logs
//
// Run logs its settings at Info when it starts ("jobs runner started") and
// when it stops; a recovery at Info and a burial at Warn, each with the
// job's last owner ("from") and its recoverer ("by"); a lost job at Warn. A
// step that fails because its context ended — a shutdown — is logged at
// Debug, not as a failure.
package jobs
