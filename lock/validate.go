package lock

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxKeyLen is the longest key, in bytes, that any backend accepts.
const MaxKeyLen = 1024

// MaxTTL is the longest ttl any backend accepts (a backend may state less
// in its Limits). Every ttl up to it converts to milliseconds, microseconds
// and nanoseconds, and adds to a time.Time, without overflow.
const MaxTTL = 366 * 24 * time.Hour

// MaxKeys is the most keys one multi-key call (TryAcquireAny, Subscribe)
// takes on any backend (a backend may state less in its Limits).
const MaxKeys = 4096

// MaxNameLen is the longest name, in bytes, of the things the tools turn
// into keys: a semaphore's, an election's, a timer's. It leaves room in a
// key of MaxKeyLen for every prefix and suffix the tools add.
const MaxNameLen = 512

// Limits are the bounds of a backend's input. They are part of its
// contract: input outside them is refused before anything is sent, with an
// error that matches ErrInvalidArgument (and ErrInvalidTTL or
// ErrInvalidKey), never retried, never converted with an overflow.
type Limits struct {
	MinTTL  time.Duration // smallest ttl (0: any positive ttl)
	MaxTTL  time.Duration // largest ttl, at most lock.MaxTTL
	MaxKeys int           // most keys in one multi-key call, at most lock.MaxKeys
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

// CheckName is the one rule for the names the tools turn into keys (what
// says which: "semaphore name", "election name", "timer name"): 1 to
// MaxNameLen bytes of valid UTF-8, without control characters and without
// braces (they would change a key's Redis Cluster hash tag). The error
// matches ErrInvalidArgument and names what and the name, quoted.
func CheckName(what, name string) error {
	if strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: %s %.64q contains a brace", ErrInvalidArgument, what, name)
	}
	return checkText(what, name, MaxNameLen)
}

// CheckOwner is the rule for owner identities (WithOwner, a registry's
// worker identity): 1 to MaxKeyLen bytes of valid UTF-8 without control
// characters, so that an owner never corrupts a record it is stored in
// or the line it is printed on.
func CheckOwner(what, owner string) error { return checkText(what, owner, MaxKeyLen) }

// checkText requires 1 to max bytes of valid UTF-8 without control
// characters.
func checkText(what, s string, max int) error {
	bad := ""
	switch {
	case s == "":
		bad = "is empty"
	case len(s) > max:
		bad = fmt.Sprintf("is %d bytes, the limit is %d", len(s), max)
	case !utf8.ValidString(s):
		bad = "is not valid UTF-8"
	case strings.ContainsFunc(s, unicode.IsControl):
		bad = "contains a control character"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s %.64q %s", ErrInvalidArgument, what, s, bad)
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
