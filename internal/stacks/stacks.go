// Package stacks reads the stacks of the running goroutines, for tests that
// look for goroutines left behind.
package stacks

import (
	"runtime"
	"strings"
)

// All returns the stack of every running goroutine by its id, as
// runtime.Stack prints it ("goroutine 7 [select]:\n..."). Goroutine ids are
// never reused, so two calls tell which goroutines started in between.
func All() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
		all[id] = g
	}
	return all
}
