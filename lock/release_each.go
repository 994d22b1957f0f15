package lock

import (
	"context"
	"errors"
	"fmt"
)

// EachReleaser is implemented by backends that release many grants in one
// round trip per chunk (each backend states its chunk size).
type EachReleaser interface {
	// ReleaseEach releases every handle (made by this Lock), independently,
	// and returns one outcome per handle in order, as its Release would:
	// nil, ErrLost, or another error (unknown). Everything a handle's
	// Release does (waking the key's waiters, replica acks, telemetry) is
	// done for each handle. A handle it cannot release this way (a shared
	// or all-of grant, a handle of another Lock, a Wrapper) gets an error
	// matching ErrInvalidArgument and nothing else is done with it: use
	// lock.ReleaseEach, which then calls that handle's own Release.
	ReleaseEach(ctx context.Context, hs []Handle) []error
}

// AfterReleaser is implemented by a Wrapper whose Release is the wrapped
// handle's Release followed by bookkeeping of its own (a semaphore.Permit
// counts the slots held): ReleaseEach releases the wrapped handle with the
// others and then calls AfterRelease with that outcome. A Wrapper that is
// not an AfterReleaser is released with its own Release.
type AfterReleaser interface {
	Wrapper
	// AfterRelease does what the wrapper's Release does once the wrapped
	// handle's Release returned err, and returns what that Release would
	// return.
	AfterRelease(ctx context.Context, err error) error
}

// ReleaseEach releases hs, independently, and returns one outcome per
// handle in order, as its Release would (nil, ErrLost, or another error:
// unknown). On an EachReleaser it releases them in a few round trips
// (see the backend's chunk size); a handle the backend cannot release so
// (a shared or all-of grant, a handle of another Lock) and every handle on
// another Lock go through their own Release, at most 16 at once. An
// AfterReleaser is released through the handle it wraps, then told the
// outcome. A nil handle, a nil Lock or a nil context is an error matching
// ErrInvalidArgument (in that handle's outcome, or in every outcome); a
// context already done is every outcome, and nothing is sent.
func ReleaseEach(ctx context.Context, l Lock, hs []Handle) []error {
	errs := make([]error, len(hs))
	fail := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if l == nil {
		return fail(fmt.Errorf("%w: nil Lock", ErrInvalidArgument))
	}
	if err := checkContext(ctx); err != nil {
		return fail(err)
	}
	if len(hs) == 1 && hs[0] != nil {
		errs[0] = releaseOne(ctx, l, hs[0])
		return errs
	}
	// targets[i] is the handle whose Release stands for hs[i]'s, under
	// layers[i] AfterReleaser layers (afterRelease walks them again).
	targets := make([]Handle, len(hs))
	var layers []int
	native := make([]Handle, 0, len(hs))
	at := make([]int, 0, len(hs))
	var own []int // released with their own Release
	for i, h := range hs {
		if h == nil {
			errs[i] = fmt.Errorf("%w: nil Handle", ErrInvalidArgument)
			continue
		}
		target, n, ownRelease := releaseTarget(h)
		if n > 0 {
			if layers == nil {
				layers = make([]int, len(hs))
			}
			layers[i] = n
		}
		targets[i] = target
		if ownRelease {
			own = append(own, i)
			continue
		}
		native = append(native, target)
		at = append(at, i)
	}
	if er, ok := l.(EachReleaser); ok && len(native) > 0 {
		out := fitAnswers(l, er.ReleaseEach(ctx, native), len(native), setErr, nil)
		for j, err := range out {
			if refusedByEach(err) {
				own = append(own, at[j])
				continue
			}
			errs[at[j]] = err
		}
	} else {
		own = append(own, at...)
	}
	runPool(len(own), func(j int) {
		i := own[j]
		errs[i] = targets[i].Release(ctx)
	})
	for i, n := range layers {
		if n > 0 {
			errs[i] = afterRelease(ctx, hs[i], n, errs[i])
		}
	}
	return errs
}

// releaseOne is ReleaseEach of h alone (not nil, ctx checked), without
// the bookkeeping of many: a Keeper's lone releases go this way.
func releaseOne(ctx context.Context, l Lock, h Handle) error {
	target, n, ownRelease := releaseTarget(h)
	er, each := l.(EachReleaser)
	var err error
	if each && !ownRelease {
		if err = fitAnswers(l, er.ReleaseEach(ctx, []Handle{target}), 1, setErr, nil)[0]; refusedByEach(err) {
			ownRelease = true
		}
	}
	if !each || ownRelease {
		err = target.Release(ctx)
	}
	return afterRelease(ctx, h, n, err)
}

// releaseTarget is the handle whose Release stands for h's, under n
// AfterReleaser layers, and whether it is released with its own Release
// (a Wrapper that is not an AfterReleaser) rather than by ReleaseEach.
func releaseTarget(h Handle) (target Handle, n int, ownRelease bool) {
	for {
		a, ok := h.(AfterReleaser)
		if !ok {
			break
		}
		inner := a.Unwrap()
		if inner == nil {
			break
		}
		n++
		h = inner
	}
	_, wrapper := h.(Wrapper)
	return h, n, wrapper
}

// refusedByEach says whether an EachReleaser's outcome for a handle is
// that it cannot release it that way (then its own Release does).
func refusedByEach(err error) bool {
	return errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrLost)
}

func setErr(e *error, err error) { *e = err }

// afterRelease tells the n AfterReleaser layers of h the outcome err of
// the release of the handle under them, innermost first, and returns the
// outermost's.
func afterRelease(ctx context.Context, h Handle, n int, err error) error {
	if n == 0 {
		return err
	}
	a := h.(AfterReleaser)
	return a.AfterRelease(ctx, afterRelease(ctx, a.Unwrap(), n-1, err))
}
