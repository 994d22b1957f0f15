package jobs

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// MaxAttempt is the largest Attempt a job may be tracked with, and so the
// most recoveries a registry counts (WithMaxRetries and Job.MaxRetries
// take at most it too): every registry stores an attempt, and adds one to
// it, without overflow.
const MaxAttempt = 1<<31 - 2

// MaxReasonLen is the longest reason, in bytes, that Bury records.
const MaxReasonLen = 4096

// leaseLimits are the limits of a registry's leases: at least a
// millisecond (every registry's resolution), at most lock.MaxTTL.
var leaseLimits = lock.Limits{MinTTL: time.Millisecond, MaxTTL: lock.MaxTTL}

// CheckID is the input check every registry runs: a context, and a job ID
// of 1 to lock.MaxKeyLen bytes. An ID is otherwise opaque (any bytes, NUL
// and control characters included), as a lock key is.
func CheckID(ctx context.Context, id string) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := lock.CheckKey(id); err != nil {
		return backendkit.Invalid("jobs", "job ID: %w", err)
	}
	return nil
}

// CheckLease is CheckID plus a lease within the registries' limits: from a
// millisecond to lock.MaxTTL (ErrInvalidTTL otherwise, never an overflowed
// deadline).
func CheckLease(ctx context.Context, id string, lease time.Duration) error {
	if err := CheckID(ctx, id); err != nil {
		return err
	}
	if err := leaseLimits.CheckTTL(lease); err != nil {
		return backendkit.Invalid("jobs", "job lease: %w", err)
	}
	return nil
}

// CheckHeartbeat is the input check of Registry.Heartbeat: the context,
// the lease, and every ref's ID (1 to lock.MaxKeyLen bytes).
func CheckHeartbeat(ctx context.Context, refs []Ref, lease time.Duration) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := leaseLimits.CheckTTL(lease); err != nil {
		return backendkit.Invalid("jobs", "job lease: %w", err)
	}
	for i, ref := range refs {
		if err := lock.CheckKey(ref.ID); err != nil {
			return backendkit.Invalid("jobs", "job ID refs[%d]: %w", i, err)
		}
	}
	return nil
}

// CheckTrack is the input check of Registry.Track: the context, the ID and
// the lease (CheckLease); an Owner that is empty (none) or a valid identity
// (backendkit.CheckOwner); an Attempt and a MaxRetries from 0 to
// MaxAttempt; and a History whose
// owners are empty or valid identities and whose attempts are within
// bounds, so that nothing a caller passes can corrupt the stored record.
func CheckTrack(ctx context.Context, job Job, lease time.Duration) error {
	if err := CheckLease(ctx, job.ID, lease); err != nil {
		return err
	}
	if err := checkOptionalOwner("job Owner", job.Owner); err != nil {
		return err
	}
	if err := checkAttempt("job Attempt", job.Attempt, MaxAttempt); err != nil {
		return err
	}
	if err := checkAttempt("job MaxRetries", job.MaxRetries, MaxAttempt); err != nil {
		return err
	}
	for i, h := range job.History {
		if err := checkOptionalOwner(fmt.Sprintf("job History[%d].From", i), h.From); err != nil {
			return err
		}
		if err := checkOptionalOwner(fmt.Sprintf("job History[%d].By", i), h.By); err != nil {
			return err
		}
		if err := checkAttempt(fmt.Sprintf("job History[%d].Attempt", i), h.Attempt, MaxAttempt+1); err != nil {
			return err
		}
	}
	return nil
}

// CheckReclaim is the input check of Registry.Reclaim: the context, the
// ID, the lease, and the recoverer's identity by (backendkit.CheckOwner).
func CheckReclaim(ctx context.Context, ref Ref, by string, lease time.Duration) error {
	if err := CheckLease(ctx, ref.ID, lease); err != nil {
		return err
	}
	return invalid(backendkit.CheckOwner("reclaiming owner (by)", by))
}

// CheckBury is the input check of Registry.Bury: the context, the ID, and
// a reason of valid UTF-8 without NUL, at most MaxReasonLen bytes (other
// control characters are kept; show the reason quoted).
func CheckBury(ctx context.Context, ref Ref, reason string) error {
	if err := CheckID(ctx, ref.ID); err != nil {
		return err
	}
	bad := ""
	switch {
	case len(reason) > MaxReasonLen:
		bad = fmt.Sprintf("is %d bytes, the limit is %d", len(reason), MaxReasonLen)
	case !utf8.ValidString(reason):
		bad = "is not valid UTF-8"
	case strings.ContainsRune(reason, 0):
		bad = "contains a NUL"
	}
	if bad != "" {
		return backendkit.Invalid("jobs", "bury reason %.64q %s", reason, bad)
	}
	return nil
}

func checkOptionalOwner(what, owner string) error {
	if owner == "" {
		return nil
	}
	return invalid(backendkit.CheckOwner(what, owner))
}

func checkAttempt(what string, n, max int) error {
	if n < 0 || n > max {
		return backendkit.Invalid("jobs", "%s %d is outside 0..%d", what, n, max)
	}
	return nil
}

// checkElection rejects an election name that leader.Run would refuse
// (backendkit.CheckName, the one rule for election names).
func checkElection(name string) error {
	return invalid(backendkit.CheckName("election name (jobs.WithElection)", name))
}

// invalid names this package in an input error of lock's.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return backendkit.Invalid("jobs", "%w", err)
}
