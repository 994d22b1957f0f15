// Package testkit holds what leasehold's tests share; its subpackages
// start servers (testenv), run child processes (childproc), cut
// connections (faultproxy), read metrics (metrictest) and list the
// backends under test (backends). Nothing in it ships.
package testkit

// Must returns v, and panics if err is not nil: for constructors whose
// arguments a test writes as literals (memlock.New, timers.New), which
// cannot fail on them.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
