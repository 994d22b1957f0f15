package lock

import "github.com/leasehold-go/leasehold/internal/answers"

// fitAnswers makes a backend's answers to a batch of n requests (its
// ClaimEach, ReleaseEach or TryAcquireAnyEach) one per request, whatever
// the backend returned (see answers.Fit): answers past the n-th are
// dropped (each passed to dropped, when it is set, which undoes what it
// may hold), and a request left unanswered gets an error matching
// ErrUnavailable (its outcome is unknown), set by unanswered.
func fitAnswers[T any](l Lock, out []T, n int, unanswered func(*T, error), dropped func(T)) []T {
	return answers.Fit(l, out, n, ErrUnavailable, unanswered, dropped)
}
