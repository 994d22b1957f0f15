package jobs

import (
	"context"
	"time"

	"github.com/leasehold-go/leasehold/internal/answers"
	"github.com/leasehold-go/leasehold/lock"
)

// BatchRecoverer is implemented by registries that can reclaim, and
// remove, many jobs in one round trip of wall time: the recovery scan of
// a Runner over such a registry recovers its expired jobs in chunks of
// RecoveryChunk, one ReclaimEach and one RemoveEach a chunk, where a
// registry without it costs two round trips a job (Reclaim, Remove).
// memjobs, redisjobs and pgjobs implement it. Each request stays one job
// on the server (one script, one statement and transaction), sent in one
// pipeline. On PostgreSQL no lock is held past one job's statement. Redis
// runs the scripts of one read of a pipeline (16 KB, about 60 reclaims)
// back to back before it serves another client: a millisecond or two, not
// a Reclaim's tens of µs (see redisjobs' Bounds). A wrapper of a registry
// that has it should implement it too, by passing the calls on, or the
// scan goes one job at a time.
type BatchRecoverer interface {
	// ReclaimEach is Reclaim of each ref with by and lease, in order: its
	// answers are one per ref, each what Reclaim would have answered after
	// the refs before it (a ref listed twice is reclaimed once, the second
	// answer ErrStale). A ref's bad input is its own answer's error, as
	// are the outcomes a failure leaves unknown (lock.ErrUnavailable); a
	// nil or ended ctx is every answer's.
	ReclaimEach(ctx context.Context, refs []Ref, by string, lease time.Duration) []Reclaimed
	// RemoveEach is Remove of each ref, in order: one answer per ref,
	// Remove's.
	RemoveEach(ctx context.Context, refs []Ref) []error
}

// Reclaimed is ReclaimEach's answer for one ref: Reclaim's job and error.
type Reclaimed struct {
	Job Job
	Err error
}

// RecoveryChunk is the most expired jobs a Runner's scan reclaims in one
// ReclaimEach (and removes in one RemoveEach), and so the most it holds
// reclaimed while it requeues them: each of them stays in flight under
// the recoverer's epoch, with the runner's ttl, until its RemoveEach. A
// recoverer that dies in the middle of a chunk leaves every job of it
// reclaimed (each counts that recovery: Attempt+1), and those it had
// requeued are requeued again by the next; one at a time, that is one job
// (or WithRecoveryConcurrency's count). A chunk whose Requeues outlast the
// ttl lets its jobs expire again: a recoverer elected meanwhile may
// requeue them too. Either way a job is requeued twice, never lost.
const RecoveryChunk = 100

// fitReclaims and fitRemoves make a registry's answers one per ref (see
// answers.Fit): a short answer leaves the refs it misses unknown.
func fitReclaims(reg BatchRecoverer, out []Reclaimed, n int) []Reclaimed {
	return answers.Fit(reg, out, n, lock.ErrUnavailable, func(r *Reclaimed, err error) { r.Err = err }, nil)
}

func fitRemoves(reg BatchRecoverer, out []error, n int) []error {
	return answers.Fit(reg, out, n, lock.ErrUnavailable, func(e *error, err error) { *e = err }, nil)
}
