package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
)

// CheckID is the input check every registry runs: a context, and a job ID
// of 1 to lock.MaxKeyLen bytes.
func CheckID(ctx context.Context, id string) error {
	if err := lock.CheckContext(ctx); err != nil {
		return err
	}
	if err := lock.CheckKey(id); err != nil {
		return fmt.Errorf("job ID: %w", err)
	}
	return nil
}

// CheckLease is CheckID plus a positive lease.
func CheckLease(ctx context.Context, id string, lease time.Duration) error {
	if err := CheckID(ctx, id); err != nil {
		return err
	}
	return lock.Limits{MinTTL: time.Millisecond}.CheckTTL(lease)
}

// checkElection rejects an election name that leader.Run would refuse: an
// empty one, or one whose lock key (leader.Key) is not a valid key.
func checkElection(name string) error {
	if name == "" {
		return fmt.Errorf("%w: jobs: empty election name", lock.ErrInvalidKey)
	}
	if err := lock.CheckKey(leader.Key(name)); err != nil {
		return fmt.Errorf("jobs: election name %q: %w", name, err)
	}
	return nil
}
