package lock

import "fmt"

// fitAnswers makes a backend's answers to a batch of n requests (its
// ClaimEach, ReleaseEach or TryAcquireAnyEach) one per request, whatever
// the backend returned: answers past the n-th are dropped (each passed to
// dropped, when it is set, which undoes what it may hold), and a request
// left unanswered gets an error matching ErrUnavailable (its outcome is
// unknown), set by unanswered. Without it a short answer read as success
// (a zero ClaimResult is a claim with no error) or crashed the caller.
func fitAnswers[T any](l Lock, out []T, n int, unanswered func(*T, error), dropped func(T)) []T {
	if len(out) == n {
		return out
	}
	err := fmt.Errorf("%w: %T answered %d of %d requests", ErrUnavailable, l, len(out), n)
	if len(out) > n {
		if dropped != nil {
			for _, a := range out[n:] {
				dropped(a)
			}
		}
		return out[:n]
	}
	fitted := make([]T, n)
	copy(fitted, out)
	for i := len(out); i < n; i++ {
		unanswered(&fitted[i], err)
	}
	return fitted
}
