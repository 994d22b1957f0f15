package jobs

import (
	"context"
	"time"

	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// reviveLease is the lease a revived job is tracked with: the smallest a
// registry accepts, so that it is expired by the next recovery scan.
const reviveLease = time.Millisecond

// Revive puts a dead job back in flight, for tools that have no Requeue
// function (the leasehold CLI and dashboard): it tracks the job again as
// owned by by, as a new job (Attempt 0, no history; its MaxRetries kept)
// with a deadline that passes at once, then purges it from the dead set.
// The leader-gated recovery scan of the application's Runner then finds it
// expired, reclaims it and requeues it through the application's Requeue,
// as it would a crashed worker's job (the history records the reclaim from
// by). That reclaim counts as a recovery (Attempt 1): under MaxRetries 0
// the job goes straight back to the dead set.
//
// A crash between the two steps leaves the job both in flight and dead,
// never lost; Revive again, or Purge, settles it. It returns ErrNotFound
// when id is not in the dead set, and an error matching
// lock.ErrInvalidArgument when by is not an identity (backendkit.CheckOwner).
// An application that has its Requeue at hand uses Runner.RetryDead
// instead, which requeues at once.
func Revive(ctx context.Context, reg Registry, id, by string) (Job, error) {
	if err := backendkit.CheckOwner("by", by); err != nil {
		return Job{}, err
	}
	d, err := reg.DeadJob(ctx, id)
	if err != nil {
		return Job{}, err
	}
	// As a new job: the dead job's history, epoch and owner stay with
	// DeadJob until the purge (as Runner.RetryDead does).
	tracked, err := reg.Track(ctx, Job{ID: d.ID, Payload: d.Payload, Owner: by, MaxRetries: d.MaxRetries}, reviveLease)
	if err != nil {
		return Job{}, err
	}
	if err := reg.Purge(ctx, id); err != nil {
		return Job{}, err
	}
	return tracked, nil
}
