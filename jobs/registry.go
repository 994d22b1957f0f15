package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrStale: the job's entry is gone or belongs to a newer epoch — it was
// reclaimed, completed or re-tracked elsewhere. A worker that gets it must
// stop working on the job: someone else owns it now.
var ErrStale = errors.New("jobs: stale job: reclaimed, completed or re-tracked elsewhere")

// DoneWindow is how long a registry remembers that an epoch of a job
// completed, so that a retried Done of it (a client that retries after a
// lost reply, a caller that retries after an unknown outcome) returns nil
// rather than ErrStale. A registry keeps one small marker per completion
// for at least DoneWindow and drops it within a bounded time after: the
// markers grow with the completion rate, never with the history.
const DoneWindow = 5 * time.Minute

// RetryWindow is how long a registry keeps the retry record of a job that a
// recoverer requeued (Registry.Remove): its Attempt, History and
// MaxRetries, which the next Track of its ID takes over, so that a job
// that comes back from a queue as Job{ID, Payload} goes on counting its
// recoveries. A day: far longer than DefaultRetryBackoffCap plus the time
// a job waits in a queue. A job taken back later (a WithRetryBackoff cap
// near a day, a queue backed up for longer) starts again from Attempt 0.
// A registry keeps one small record per requeued job that has not been
// tracked again, for at most about RetryWindow: the records grow with the
// jobs requeued and not yet taken back, never with the history.
const RetryWindow = 24 * time.Hour

// HeartbeatError is the error of a Registry.Heartbeat that sent its refs
// in chunks of which some failed. The jobs of the chunks that answered
// were extended, or are in the lost IDs Heartbeat returned with it, as
// after a call that succeeded; the jobs of the chunks that failed are
// listed in Unknown: they may or may not have been extended, and stay
// valid until their lease ends, as after any heartbeat of unknown outcome.
// It wraps the first failed chunk's error (lock.ErrUnavailable for an
// outage).
type HeartbeatError struct {
	// Unknown lists the IDs whose chunk failed, in the order of the refs.
	Unknown []string
	// Err is the first failed chunk's error.
	Err error
}

func (e *HeartbeatError) Error() string {
	return fmt.Sprintf("jobs: heartbeat of %d jobs failed (outcome unknown): %v", len(e.Unknown), e.Err)
}

// Unwrap returns the first failed chunk's error.
func (e *HeartbeatError) Unwrap() error { return e.Err }

// ErrNotFound: no such job (in flight or dead).
var ErrNotFound = errors.New("jobs: no such job")

// Job is a unit of work as the registry records it.
type Job struct {
	// ID names the job: 1 to lock.MaxKeyLen bytes, unique among the jobs in
	// flight (tracking an ID again replaces its entry).
	ID string
	// Payload is what the job needs to run again elsewhere, stored as is
	// (the registry does not read it). The operator listings
	// (Inspector.InFlight and Inspector.Dead) leave it nil; Track, Expired,
	// Reclaim and DeadJob carry it.
	Payload []byte
	// Owner is the identity of the worker (or recoverer) that holds it.
	Owner string
	// Attempt counts the recoveries: 0 for the first run, +1 each time a
	// crashed worker's job is reclaimed. A handler that sees Attempt > 0
	// knows the job may have run (partly) before. The registry keeps the
	// count by ID (Registry.Track): a caller need not carry it.
	Attempt int
	// MaxRetries is how many recoveries this job gets before the dead set:
	// 0 for the Runner's (WithMaxRetries), else 1 to MaxAttempt. The
	// registry keeps it with the job like Attempt.
	MaxRetries int
	// Epoch changes every time the job is tracked or reclaimed; heartbeats,
	// Done and Remove act only on the epoch they name.
	Epoch uint64
	// Deadline is when the entry expires without a heartbeat (server time).
	Deadline time.Time
	// History lists the recoveries, oldest first.
	History []Recovery
}

// Ref names one epoch of a job.
type Ref struct {
	// ID is the job's ID.
	ID string
	// Epoch is the job's epoch when tracked or reclaimed; an operation on a
	// Ref acts only while the entry still has it.
	Epoch uint64
}

// Ref returns the job's reference.
func (j Job) Ref() Ref { return Ref{j.ID, j.Epoch} }

// Recovery is one entry of a job's history.
type Recovery struct {
	At      time.Time // when it was reclaimed (server time)
	From    string    // the owner whose heartbeat had stopped
	By      string    // the recoverer
	Attempt int       // the attempt it became
}

// DeadJob is a job in the dead set.
type DeadJob struct {
	Job
	// DiedAt is when the job was buried (server time).
	DiedAt time.Time
	// Reason says why, as the recoverer gave it to Bury (e.g. the number
	// of recoveries against MaxRetries).
	Reason string
}

// Counts summarises a registry, as Inspector.Counts reports it.
type Counts struct {
	Tracked int64 // in flight, expired ones included
	Expired int64 // in flight with a past deadline
	Dead    int64
}

// Registry is the durable in-flight state of jobs: the recovery protocol
// that Runner, RetryDead and Revive drive. jobs/memjobs, jobs/redisjobs and
// jobs/pgjobs implement it, and Inspector too; jobs/registrytest is the
// conformance suite every implementation runs. Deadlines are on the
// registry's clock (the server's), never the caller's. Every method is one
// round trip, but that a registry may read a listing in pages (one round
// trip each) so that no server call does unbounded work: redisjobs and
// pgjobs state their page and chunk sizes. A listing's limit is any int: 0
// or less lists all, and a limit above what there is lists all there is.
type Registry interface {
	// Track records a started job with a fresh epoch and a deadline lease
	// from now, replacing any entry of the same ID (which then goes stale).
	// The count of recoveries is the registry's, by ID: when the ID is in
	// flight, or has a retry record (Remove, within RetryWindow), whose
	// Attempt is at least job.Attempt, the job takes that Attempt and
	// History over (else it keeps its own), and that MaxRetries when
	// job.MaxRetries is 0; the retry record is consumed. So a job tracked
	// again as Job{ID, Payload} from a queue keeps counting towards the
	// dead set. It returns the job as recorded. Input is checked by
	// CheckTrack: an ID is opaque bytes (1 to lock.MaxKeyLen, NUL included) and round-trips
	// through every method; owners are identities (backendkit.CheckOwner) or
	// empty; the lease is within 1 ms..lock.MaxTTL (lock.ErrInvalidTTL).
	Track(ctx context.Context, job Job, lease time.Duration) (Job, error)
	// Heartbeat extends the deadline of every listed job whose epoch still
	// matches, to lease from now, and returns the IDs of the others. A
	// registry may send refs in chunks (redisjobs and pgjobs do, all in
	// one round trip); when some chunks fail and others answer, it returns
	// the lost IDs of those that answered and a *HeartbeatError naming the
	// IDs whose outcome is unknown. Any other error: every outcome is
	// unknown.
	Heartbeat(ctx context.Context, refs []Ref, lease time.Duration) (lost []string, err error)
	// Done removes the job if its epoch matches and returns nil. Done is
	// idempotent per epoch: a Done of an epoch that already completed
	// through Done returns nil too, for at least DoneWindow after the
	// completion (a retry whose first attempt took effect), whatever
	// happened to the ID since. A Done of any other epoch — reclaimed by a
	// recoverer (a zombie's late completion), replaced by a new Track,
	// removed, buried, or never tracked — returns ErrStale. The job's count
	// of recoveries ends with its completion (a retry record of its ID is
	// dropped): a later Track of the ID starts from the caller's Attempt.
	Done(ctx context.Context, ref Ref) error
	// Expired lists up to limit jobs whose deadline has passed, earliest
	// deadline first, through an index ordered by deadline: its cost grows
	// with the number of expired jobs, not the number tracked. It lists
	// them whole, payloads included: it is the recovery scan's, which
	// requeues them (an operator's view lists Inspector.InFlight, without
	// them).
	Expired(ctx context.Context, limit int) ([]Job, error)
	// Reclaim takes an expired job over if its epoch still matches and its
	// deadline has still passed: a new epoch, Attempt+1, owner by, a
	// deadline lease from now, and a history entry. Else ErrStale. by is
	// an identity (backendkit.CheckOwner; CheckReclaim).
	Reclaim(ctx context.Context, ref Ref, by string, lease time.Duration) (Job, error)
	// Remove drops the job if its epoch matches (after a requeue), else
	// returns ErrStale (it leaves no completion marker: a Done of that
	// epoch afterwards is ErrStale). It leaves a retry record of the job's
	// Attempt, History and MaxRetries, which the next Track of its ID
	// takes over, or which expires after RetryWindow. Retry records are not
	// in flight: Expired, Inspector.InFlight and Inspector.Counts leave
	// them out.
	Remove(ctx context.Context, ref Ref) error
	// Bury moves the job to the dead set if its epoch matches, else
	// ErrStale. The reason is checked by CheckBury. The dead job keeps
	// the count (Attempt, History, MaxRetries); a retry record of its ID
	// is dropped.
	Bury(ctx context.Context, ref Ref, reason string) error
	// DeadJob returns one dead job whole, payload included, or
	// ErrNotFound: what RetryDead and Revive put back in flight.
	DeadJob(ctx context.Context, id string) (DeadJob, error)
	// Purge deletes a dead job, and the retry record of its ID if it has
	// one, or returns ErrNotFound (and deletes nothing): an operator's way
	// to drop a job for good, and the last step of RetryDead and Revive on
	// a registry that is no BurialPurger.
	Purge(ctx context.Context, id string) error
}

// BurialPurger is implemented by registries that can purge one burial of
// a job rather than whatever is dead under its ID: Revive and
// Runner.RetryDead purge the dead record they took the job out of this way,
// so that a purge that reaches the server late (after the revived job was
// reclaimed and buried again) cannot delete the newer burial. memjobs,
// redisjobs and pgjobs implement it; with a registry that does not,
// Revive and RetryDead purge by ID under a holding lease of a minute.
type BurialPurger interface {
	// PurgeBurial deletes the dead job ref.ID when it was buried at epoch
	// ref.Epoch (its DeadJob's Epoch); else it returns ErrNotFound and
	// deletes nothing. Unlike Purge it leaves the ID's retry record: Bury
	// dropped the one before, so a retry record is of a later life of the
	// job (revived, reclaimed, requeued), whose count it keeps.
	PurgeBurial(ctx context.Context, ref Ref) error
}

// Inspector is implemented by registries that can list their jobs for an
// operator (the leasehold CLI and dashboard), as lock.Inspector is by
// backends that can say who holds what. It is read-only and not part of
// the recovery protocol: Runner never calls it. Its listings carry no
// payloads (Payload is nil, and the payloads stay on the server, whatever
// their size): Registry.DeadJob returns one dead job whole, and
// Registry.Expired lists expired jobs whole for the recovery scan. A limit
// is any int, as in Registry. A wrapper of a registry that has it should
// implement it too, by passing the calls on.
type Inspector interface {
	// Counts reports how many jobs are tracked, expired and dead.
	Counts(ctx context.Context) (Counts, error)
	// InFlight lists up to limit tracked jobs, ordered by deadline
	// (earliest first, so the expired ones come first), without payloads.
	InFlight(ctx context.Context, limit int) ([]Job, error)
	// Dead lists up to limit dead jobs, the most recent first, without
	// payloads.
	Dead(ctx context.Context, limit int) ([]DeadJob, error)
}
