//go:build !linux

package testenv

// listensOn cannot tell without Linux's /proc, and reports true.
func listensOn(pid, port int) bool { return true }
