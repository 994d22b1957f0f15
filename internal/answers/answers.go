// Package answers fits the answers of a batch call to its requests: one
// answer per request, whatever the implementation returned.
package answers

import "fmt"

// Fit makes the answers of who (a backend or registry) to a batch of n
// requests one per request: answers past the n-th are dropped (each passed
// to dropped, when it is set, which undoes what it may hold), and a
// request left unanswered gets an error matching unknown (its outcome is
// unknown: lock.ErrUnavailable), set by unanswered. Without it a short
// answer reads as success (a zero result has no error) or crashes the
// caller.
func Fit[T any](who any, out []T, n int, unknown error, unanswered func(*T, error), dropped func(T)) []T {
	if len(out) == n {
		return out
	}
	err := fmt.Errorf("%w: %T answered %d of %d requests", unknown, who, len(out), n)
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
