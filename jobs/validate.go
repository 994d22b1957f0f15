package jobs

import (
	"context"
	"fmt"
	"time"

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
	return lock.CheckTTL(lease, time.Millisecond)
}
