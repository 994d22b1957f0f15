package lock

import (
	"errors"
	"fmt"
	"time"
)

// The sentinel errors of the contract. Compare with errors.Is: backends wrap
// them with detail (the key, the driver's error, the remaining ttl).
var (
	// ErrNotAcquired: someone else holds the key. TryAcquire and TryAcquireAny
	// return it; RemainingTTL tells how long the current grant has left when
	// the backend reported it.
	ErrNotAcquired = errors.New("lock: not acquired: held by another owner")

	// ErrLost: the grant is gone (expired, taken over, released, or its
	// session was cut). Extend never re-acquires after it; a second Release
	// returns it; a Keep lease's context is cancelled with it as the cause.
	ErrLost = errors.New("lock: grant lost")

	// ErrUnavailable: the backend could not be reached or failed. The outcome
	// of the operation is unknown: an Extend that returns it leaves the grant
	// valid until Handle.ValidUntil at best.
	ErrUnavailable = errors.New("lock: backend unavailable")

	// ErrInvalidArgument is matched by every input error: ErrInvalidKey,
	// ErrInvalidTTL, a nil context, a nil lock or function, a bad option.
	ErrInvalidArgument error = &invalidError{"lock: invalid argument"}

	// ErrInvalidKey: the key is empty or longer than MaxKeyLen bytes.
	ErrInvalidKey error = &invalidError{"lock: invalid key"}

	// ErrInvalidTTL: the ttl is zero, negative or below the backend's minimum.
	ErrInvalidTTL error = &invalidError{"lock: invalid ttl"}

	// ErrStaleToken is returned by a fenced resource (Fence) that has
	// already accepted a write under a newer grant.
	ErrStaleToken = errors.New("lock: stale fencing token")
)

// invalidError makes every specific input error also match ErrInvalidArgument.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

func (e *invalidError) Is(target error) bool { return target == ErrInvalidArgument }

// NotAcquiredError is the error a backend returns when the key is held
// (backendkit.NotAcquired builds it). It matches ErrNotAcquired.
type NotAcquiredError struct {
	// Key is the key that is held, as the caller passed it; for
	// TryAcquireAny, the keys joined with commas (see backendkit.NotAcquiredAny).
	Key string
	// Remaining is the current grant's remaining ttl as the backend saw it,
	// or 0 when unknown. Acquire sleeps no longer than this before it tries
	// again when no release notification arrives.
	Remaining time.Duration
}

// Error says which key is held and, when known, for how long still.
func (e *NotAcquiredError) Error() string {
	if e.Remaining > 0 {
		return fmt.Sprintf("lock: not acquired: %q is held by another owner (%v left)", e.Key, e.Remaining.Round(time.Millisecond))
	}
	return fmt.Sprintf("lock: not acquired: %q is held by another owner", e.Key)
}

// Is reports whether target is ErrNotAcquired, so that
// errors.Is(err, ErrNotAcquired) holds for every *NotAcquiredError.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// RemainingTTL reports the remaining ttl carried by a not-acquired error, or 0.
func RemainingTTL(err error) time.Duration {
	if na, ok := errors.AsType[*NotAcquiredError](err); ok {
		return na.Remaining
	}
	return 0
}

// lostError is the cause a Keep lease's context is cancelled with.
type lostError struct{ reason string }

func (e *lostError) Error() string        { return "lock: grant lost: " + e.reason }
func (e *lostError) Is(target error) bool { return target == ErrLost }

// lost returns an error that matches ErrLost and says why the grant was
// lost (backendkit.Lost).
func lost(reason string) error { return &lostError{reason} }
