package lock

import (
	"context"
	"fmt"
	"time"
)

// Claim takes key for ttl and lets it lapse: a one-off grant that is never
// extended or released, for "whoever claims this first does it" (a
// timer's tick). It returns the claim's fencing token. On a Claimer it
// calls Claim; otherwise it takes a grant with TryAcquire and leaves it to
// expire. A key used for claims should not also be locked: on some
// backends (pglock) claims and grants are kept apart. The key and the ttl
// are checked against l's Limits first, on either path.
func Claim(ctx context.Context, l Lock, key string, ttl time.Duration) (uint64, error) {
	if l == nil {
		return 0, fmt.Errorf("%w: nil Lock", ErrInvalidArgument)
	}
	if err := validate(ctx, key, ttl, LimitsOf(l)); err != nil {
		return 0, err
	}
	if c, ok := l.(Claimer); ok {
		return c.Claim(ctx, key, ttl)
	}
	h, err := l.TryAcquire(ctx, key, ttl)
	if err != nil {
		return 0, err
	}
	return h.Token(), nil
}
