package memlock

import (
	"context"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Subscribe implements lock.Waiter: a release, a forced release, or the
// removal of an expired grant wakes the key's subscribers at once.
func (l *Lock) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	if err := backendkit.ValidateSubscribe(ctx, keys, lock.DefaultLimits); err != nil {
		return nil, err
	}
	return l.notifier.Subscribe(keys...), nil
}
