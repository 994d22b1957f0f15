package backendkit

import (
	"context"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

var (
	checkContext  = kit.CheckContext.(func(context.Context) error)
	validate      = kit.Validate.(func(context.Context, string, time.Duration, lock.Limits) error)
	validateGroup = kit.ValidateGroup.(func(context.Context, []string, time.Duration, lock.Limits) error)
)

// CheckContext rejects a nil context (an error that matches
// lock.ErrInvalidArgument) and reports a context that is already done with
// its cause.
func CheckContext(ctx context.Context) error { return checkContext(ctx) }

// ValidateKey checks the context and the key of an operation that takes no
// ttl (Inspect, ForceRelease, and the like).
func ValidateKey(ctx context.Context, key string) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	return lock.CheckKey(key)
}

// Validate is the one input check every backend runs before TryAcquire,
// AcquireQueued and Claim: context, key and ttl against the backend's
// limits.
func Validate(ctx context.Context, key string, ttl time.Duration, lim lock.Limits) error {
	return validate(ctx, key, ttl, lim)
}

// ValidateKeys is Validate for TryAcquireAny: at least one key and at most
// lim.MaxKeys, each of them valid, and the ttl.
func ValidateKeys(ctx context.Context, keys []string, ttl time.Duration, lim lock.Limits) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := lim.CheckKeys(keys); err != nil {
		return err
	}
	return lim.CheckTTL(ttl)
}

// ValidateGroup is Validate for lock.GroupLock's TryAcquireAll: as
// ValidateKeys, and no key twice.
func ValidateGroup(ctx context.Context, keys []string, ttl time.Duration, lim lock.Limits) error {
	return validateGroup(ctx, keys, ttl, lim)
}

// ValidateSubscribe is the input check of lock.Waiter's Subscribe: the
// context and the keys, as for TryAcquireAny.
func ValidateSubscribe(ctx context.Context, keys []string, lim lock.Limits) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	return lim.CheckKeys(keys)
}

// RemainingMillis converts a remaining ttl that a server reported in
// milliseconds (of a grant that any client may have written, so of any
// size) to a Duration without overflow: below zero is 0, above lock.MaxTTL
// is lock.MaxTTL. Backends use it for the hints of lock.ErrNotAcquired and
// for lock.Inspector's Remaining.
func RemainingMillis(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms >= int64(lock.MaxTTL/time.Millisecond):
		return lock.MaxTTL
	}
	return time.Duration(ms) * time.Millisecond
}

// DriftAllowance is what a network backend subtracts from a ttl for the
// rate difference between its clock and the server's: 1% of the ttl plus
// 2 ms (the allowance of Redlock's analysis).
func DriftAllowance(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// ValidUntil is the conservative deadline of a grant of ttl whose request
// was sent at sent (a time.Now() reading taken before sending): what a
// backend's Handle.ValidUntil reports.
func ValidUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - DriftAllowance(ttl))
}
