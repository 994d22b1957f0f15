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
	// targets[i] is the handle whose Release stands for hs[i]'s (through
	// every AfterReleaser layer); hooks[i] the layers, outermost first.
	targets := make([]Handle, len(hs))
	var hooks map[int][]AfterReleaser
	native := make([]Handle, 0, len(hs))
	at := make([]int, 0, len(hs))
	var own []int // released with their own Release
	for i, h := range hs {
		if h == nil {
			errs[i] = fmt.Errorf("%w: nil Handle", ErrInvalidArgument)
			continue
		}
		for {
			a, ok := h.(AfterReleaser)
			if !ok {
				break
			}
			inner := a.Unwrap()
			if inner == nil {
				break
			}
			if hooks == nil {
				hooks = make(map[int][]AfterReleaser)
			}
			hooks[i] = append(hooks[i], a)
			h = inner
		}
		targets[i] = h
		if _, wrapper := h.(Wrapper); wrapper {
			own = append(own, i)
			continue
		}
		native = append(native, h)
		at = append(at, i)
	}
	if er, ok := l.(EachReleaser); ok && len(native) > 0 {
		for j, err := range er.ReleaseEach(ctx, native) {
			if errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrLost) {
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
	for i, hs := range hooks {
		for j := len(hs) - 1; j >= 0; j-- {
			errs[i] = hs[j].AfterRelease(ctx, errs[i])
		}
	}
	return errs
}
