package lock

import (
	"context"
	"fmt"
	"time"
)

// MaxKeyLen is the longest key, in bytes, that any backend accepts.
const MaxKeyLen = 1024

// CheckKey reports whether key is acceptable to every backend.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// CheckTTL reports whether ttl is positive and at least min (0: no minimum).
func CheckTTL(ttl, min time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: ttl must be positive, got %v", ErrInvalidTTL, ttl)
	case ttl < min:
		return fmt.Errorf("%w: ttl %v is below this backend's minimum %v", ErrInvalidTTL, ttl, min)
	}
	return nil
}

// CheckContext rejects a nil context and reports a context that is already
// done with its cause.
func CheckContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// ValidateKey checks the context and the key of an operation that takes no
// ttl (Inspect, ForceRelease, and the like).
func ValidateKey(ctx context.Context, key string) error {
	if err := CheckContext(ctx); err != nil {
		return err
	}
	return CheckKey(key)
}

// Validate is the one input check every backend runs before TryAcquire:
// context, key and ttl (against the backend's minimum, 0 for none).
func Validate(ctx context.Context, key string, ttl, minTTL time.Duration) error {
	if err := CheckContext(ctx); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	return CheckTTL(ttl, minTTL)
}

// ValidateKeys is Validate for TryAcquireAny and Subscribe: at least one key,
// each of them valid.
func ValidateKeys(ctx context.Context, keys []string, ttl, minTTL time.Duration) error {
	if err := CheckContext(ctx); err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no keys", ErrInvalidKey)
	}
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	return CheckTTL(ttl, minTTL)
}

// DriftAllowance is what a network backend subtracts from a ttl for the
// rate difference between its clock and the server's: 1% of the ttl plus
// 2 ms (the allowance of Redlock's analysis).
func DriftAllowance(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// ValidUntil is the conservative deadline of a grant of ttl whose request
// was sent at sent (a time.Now() reading taken before sending).
func ValidUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - DriftAllowance(ttl))
}
