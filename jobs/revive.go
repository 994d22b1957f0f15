package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// reviveLease is the lease a revived job is left with once its dead record
// is purged: the smallest a registry accepts, so that it is expired by the
// next recovery scan.
const reviveLease = time.Millisecond

// holdLease is the lease a job taken out of the dead set (Revive,
// Runner.RetryDead) is tracked with until its dead record is purged: no
// recovery scan can reclaim it meanwhile, and so none can bury it again
// before that purge, which, by ID (a registry that is no BurialPurger),
// would delete the new burial (the job would then be nowhere). The purge
// is bounded by half of it; a BurialPurger's purge of the one burial is
// safe however late it lands. A
// crash before the last step leaves the job in flight under it: the
// recovery scan requeues it once it passes.
const holdLease = time.Minute

// unbury puts the dead job id back in flight as a new job owned by owner
// — its ID, payload and MaxRetries, Attempt 0, no history — under
// holdLease, and then purges it from the dead set. It returns the job as
// tracked. A crash in between leaves it both in flight and dead, never
// lost.
func unbury(ctx context.Context, reg Registry, id, owner string) (Job, error) {
	d, err := reg.DeadJob(ctx, id)
	if err != nil {
		return Job{}, err
	}
	// As a new job: the dead job's history, epoch and owner stay with
	// DeadJob until the purge.
	tracked, err := reg.Track(ctx, Job{ID: d.ID, Payload: d.Payload, Owner: owner, MaxRetries: d.MaxRetries}, holdLease)
	if err != nil {
		return Job{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, holdLease/2)
	defer cancel()
	if bp, ok := reg.(BurialPurger); ok {
		// ErrNotFound: the burial is gone already (purged, or replaced by
		// a newer burial of the revived job, which stays): the job was
		// taken out of it all the same.
		if err := bp.PurgeBurial(pctx, d.Ref()); err != nil && !errors.Is(err, ErrNotFound) {
			return Job{}, err
		}
		return tracked, nil
	}
	if err := reg.Purge(pctx, id); err != nil {
		return Job{}, err
	}
	return tracked, nil
}

// Revive puts a dead job back in flight, for tools that have no Requeue
// function (the leasehold CLI and dashboard): it tracks the job again as
// owned by by, as a new job (Attempt 0, no history; its MaxRetries kept)
// under a holding lease of a minute, purges it from the dead set, and then
// brings its deadline forward to now (a heartbeat of the smallest lease). The
// leader-gated recovery scan of the application's Runner then finds it
// expired, reclaims it and requeues it through the application's Requeue,
// as it would a crashed worker's job (the history records the reclaim from
// by). That reclaim counts as a recovery (Attempt 1): under MaxRetries 0
// the job goes straight back to the dead set. No scan can reclaim it
// before the purge, and the purge of a BurialPurger deletes the burial the
// job was taken out of alone: neither can delete such a new burial.
//
// A crash before the purge leaves the job both in flight and dead, never
// lost; Revive again, or Purge, settles it. After the purge the job is
// revived: if bringing its deadline forward fails, Revive still returns
// nil and the job is requeued once the minute passes. The Job returned is
// the one Track recorded (its Deadline the hold's end). It returns
// ErrNotFound when id is not in the dead set, and an error matching
// lock.ErrInvalidArgument when by is not an identity
// (backendkit.CheckOwner). An application that has its Requeue at hand
// uses Runner.RetryDead instead, which requeues at once.
func Revive(ctx context.Context, reg Registry, id, by string) (Job, error) {
	if err := backendkit.CheckOwner("by", by); err != nil {
		return Job{}, err
	}
	tracked, err := unbury(ctx, reg, id, by)
	if err != nil {
		return Job{}, err
	}
	// Whatever its outcome: the job was revived, and expires by now or
	// at the hold's end.
	_, _ = reg.Heartbeat(ctx, []Ref{tracked.Ref()}, reviveLease)
	return tracked, nil
}
