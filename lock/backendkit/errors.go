package backendkit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

// Unavailable wraps a driver or network error so that it satisfies
// errors.Is(err, lock.ErrUnavailable) and still exposes the original
// error. It returns nil for a nil err.
func Unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, lock.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", lock.ErrUnavailable, op, err)
}

// NotAcquired returns a *lock.NotAcquiredError for key. A remaining ttl
// outside [0, lock.MaxTTL] (a backend's reading of a grant some other
// client wrote) is taken as 0 below and lock.MaxTTL above, so that no
// waiter adds to it with an overflow.
func NotAcquired(key string, remaining time.Duration) error {
	return &lock.NotAcquiredError{Key: key, Remaining: min(max(remaining, 0), lock.MaxTTL)}
}

// maxKeysLabel is how long NotAcquiredAny lets the keys' list grow.
const maxKeysLabel = 256

// NotAcquiredAny is NotAcquired for the keys of one TryAcquireAny: Key is
// the keys joined with commas, shortened to the first ones and a count
// when that would be longer than a few hundred bytes (a call may have
// lock.MaxKeys keys of lock.MaxKeyLen bytes each).
func NotAcquiredAny(keys []string, remaining time.Duration) error {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 && b.Len()+1+len(k) > maxKeysLabel {
			fmt.Fprintf(&b, ",… (%d keys)", len(keys))
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
	}
	return NotAcquired(b.String(), remaining)
}

var lost = kit.Lost.(func(string) error)

// Lost returns an error that matches lock.ErrLost and says why the grant
// was lost: the cause a lease's context is cancelled with.
func Lost(reason string) error { return lost(reason) }
