package lock

import (
	"context"
	"fmt"
	"time"
)

// The limits every backend keeps within (a backend may state less in its
// Limits).
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 1024
	// MaxTTL is the longest ttl. Every ttl up to it converts to
	// milliseconds, microseconds and nanoseconds, and adds to a
	// time.Time, without overflow.
	MaxTTL = 366 * 24 * time.Hour
	// MaxKeys is the most keys one multi-key call (TryAcquireAny,
	// Subscribe) takes.
	MaxKeys = 4096
	// MaxNameLen is the longest name, in bytes, of the things the tools
	// turn into keys: a semaphore's, an election's, a timer's. It leaves
	// room in a key of MaxKeyLen for every prefix and suffix they add.
	MaxNameLen = 512
)

// Limits are the bounds of a backend's input. They are part of its
// contract: input outside them is refused before anything is sent, with an
// error that matches ErrInvalidArgument (and ErrInvalidTTL or
// ErrInvalidKey), never retried, never converted with an overflow.
type Limits struct {
	MinTTL  time.Duration // smallest ttl (0: any positive ttl)
	MaxTTL  time.Duration // largest ttl, at most lock.MaxTTL
	MaxKeys int           // most keys in one multi-key call, at most lock.MaxKeys
	// MaxGroupKeys is the most keys of one all-of grant (GroupLock's
	// TryAcquireAll), at most MaxKeys; 0 means MaxKeys. A backend grants a
	// group in one atomic server call, which may hold fewer keys than
	// its other multi-key calls spread over several.
	MaxGroupKeys int
}

// DefaultLimits are the limits of a backend that states none.
var DefaultLimits = Limits{MaxTTL: MaxTTL, MaxKeys: MaxKeys}

// Limited is implemented by backends, and by their handles, that state
// their Limits. Keep checks a handle's, and the tools check a Lock's, so
// that a bad ttl is refused where the caller passed it.
type Limited interface {
	Limits() Limits
}

// LimitsOf returns v's Limits when v (a Lock or a Handle) states them, and
// DefaultLimits otherwise. Unset fields take the defaults.
func LimitsOf(v any) Limits {
	lim := DefaultLimits
	if l, ok := v.(Limited); ok {
		lim = l.Limits()
		if lim.MaxTTL <= 0 || lim.MaxTTL > MaxTTL {
			lim.MaxTTL = MaxTTL
		}
		if lim.MaxKeys <= 0 || lim.MaxKeys > MaxKeys {
			lim.MaxKeys = MaxKeys
		}
	}
	return lim
}

// CheckTTL reports whether ttl is within the limits: positive, at least
// MinTTL and at most MaxTTL.
func (lim Limits) CheckTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: ttl must be positive, got %v", ErrInvalidTTL, ttl)
	case ttl < lim.MinTTL:
		return fmt.Errorf("%w: ttl %v is below this backend's minimum %v", ErrInvalidTTL, ttl, lim.MinTTL)
	case ttl > lim.maxTTL():
		return fmt.Errorf("%w: ttl %v is above this backend's maximum %v", ErrInvalidTTL, ttl, lim.maxTTL())
	}
	return nil
}

// CheckKeys reports whether keys is a valid key set for one multi-key call:
// at least one key, at most MaxKeys, each of them valid.
func (lim Limits) CheckKeys(keys []string) error {
	max := lim.MaxKeys
	if max <= 0 || max > MaxKeys {
		max = MaxKeys
	}
	switch {
	case len(keys) == 0:
		return fmt.Errorf("%w: no keys", ErrInvalidKey)
	case len(keys) > max:
		return fmt.Errorf("%w: %d keys in one call, this backend's maximum is %d", ErrInvalidKey, len(keys), max)
	}
	for _, k := range keys {
		if err := CheckKey(k); err != nil {
			return err
		}
	}
	return nil
}

func (lim Limits) maxTTL() time.Duration {
	if lim.MaxTTL <= 0 || lim.MaxTTL > MaxTTL {
		return MaxTTL
	}
	return lim.MaxTTL
}

// CheckKey reports whether key is acceptable to every backend: 1 to
// MaxKeyLen bytes. A key is otherwise opaque: any bytes, control
// characters and invalid UTF-8 included (show it quoted).
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// checkContext rejects a nil context and reports a context that is already
// done with its cause (backendkit.CheckContext).
func checkContext(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// validate checks the context, the key and the ttl against lim
// (backendkit.Validate).
func validate(ctx context.Context, key string, ttl time.Duration, lim Limits) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	return lim.CheckTTL(ttl)
}
