package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// AnyRequest is one request of TryAcquireAnyEach: one free key among Keys,
// for TTL.
type AnyRequest struct {
	Keys []string
	TTL  time.Duration
}

// AnyResult is one request's outcome: the Handle of the key granted, or Err
// (ErrNotAcquired, with the shortest remaining ttl where known, when every
// key was held).
type AnyResult struct {
	Handle Handle
	Err    error
}

// TryAcquireAnyEach makes every request, independently, and returns one
// result per request in order: natively on an AnyEachAcquirer, else each
// one by MultiLock.TryAcquireAny (or TryAcquire of its keys in turn from a
// random start), up to 16 at once (as a Keeper's renewals). Input is
// validated per request (a bad request fails alone): the context, 1 to
// LimitsOf(l).MaxKeys valid keys, and the ttl. The handles are ordinary
// grants: Extend, Release, Keep and a Keeper take them.
func TryAcquireAnyEach(ctx context.Context, l Lock, reqs []AnyRequest) []AnyResult {
	res := make([]AnyResult, len(reqs))
	var lim Limits
	if l != nil {
		lim = LimitsOf(l)
	}
	bad := 0
	for i, r := range reqs {
		if res[i].Err = validateAny(ctx, l, r, lim); res[i].Err != nil {
			bad++
		}
	}
	if bad == len(reqs) {
		return res
	}
	valid, at := reqs, []int(nil) // at: of reqs, when some are left out
	if bad > 0 {
		valid, at = make([]AnyRequest, 0, len(reqs)-bad), make([]int, 0, len(reqs)-bad)
		for i, r := range reqs {
			if res[i].Err == nil {
				valid, at = append(valid, r), append(at, i)
			}
		}
	}
	var out []AnyResult
	if a, ok := l.(AnyEachAcquirer); ok {
		out = a.TryAcquireAnyEach(ctx, valid)
	} else {
		out = make([]AnyResult, len(valid))
		runPool(len(valid), func(j int) {
			out[j].Handle, out[j].Err = tryAny(ctx, l, valid[j].Keys, valid[j].TTL)
		})
	}
	out = fitAnswers(l, out, len(valid), func(r *AnyResult, err error) { r.Err = err }, func(r AnyResult) {
		if r.Handle != nil { // a grant no request asked for: let it go
			_ = r.Handle.Release(context.WithoutCancel(ctx))
		}
	})
	for j := range out {
		if out[j].Handle == nil && out[j].Err == nil {
			out[j].Err = fmt.Errorf("%w: %T answered a request with neither a grant nor an error", ErrUnavailable, l)
		}
	}
	if at == nil {
		return out
	}
	for j, i := range at {
		res[i] = out[j]
	}
	return res
}

// AnyEachAcquirer is implemented by backends that make many independent
// TryAcquireAny in one round trip per chunk (per Cluster slot on Redis).
// Timers take the slots of every tick due at one instant this way.
type AnyEachAcquirer interface {
	// TryAcquireAnyEach makes each request as TryAcquireAny would,
	// independently of the others, and returns one result per request, in
	// order. Each request's input is checked on its own: a bad request
	// fails alone. An error that stopped the whole call (the server
	// unreachable) is in the result of every request it left unanswered.
	TryAcquireAnyEach(ctx context.Context, reqs []AnyRequest) []AnyResult
}

// validateAny checks one request of TryAcquireAnyEach against lim, as a
// backend checks TryAcquireAny's input (backendkit.ValidateKeys).
func validateAny(ctx context.Context, l Lock, r AnyRequest, lim Limits) error {
	if l == nil {
		return fmt.Errorf("%w: nil Lock", ErrInvalidArgument)
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	if err := lim.CheckKeys(r.Keys); err != nil {
		return err
	}
	return lim.CheckTTL(r.TTL)
}

// tryAny is TryAcquireAny on a MultiLock, else TryAcquire of the keys in
// turn from a random one until one is granted or fails otherwise than
// with ErrNotAcquired; when every key is held, the error carries the
// shortest remaining ttl reported.
func tryAny(ctx context.Context, l Lock, keys []string, ttl time.Duration) (Handle, error) {
	if m, ok := l.(MultiLock); ok {
		return m.TryAcquireAny(ctx, keys, ttl)
	}
	off := rand.N(len(keys))
	var shortest time.Duration
	for i := range keys {
		h, err := l.TryAcquire(ctx, keys[(off+i)%len(keys)], ttl)
		if err == nil || !errors.Is(err, ErrNotAcquired) {
			return h, err
		}
		if r := RemainingTTL(err); r > 0 && (shortest == 0 || r < shortest) {
			shortest = r
		}
	}
	key := keys[0]
	if len(keys) > 1 {
		key = fmt.Sprintf("%s,… (%d keys)", keys[0], len(keys))
	}
	return nil, &NotAcquiredError{Key: key, Remaining: shortest}
}
