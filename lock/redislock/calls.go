package redislock

import (
	"context"
	"sync"
)

// callArgs is the most arguments an acquire or release call has.
const callArgs = 3 + 4 + 7

// calls holds the argument arrays of acquire attempts and releases. A
// handle keeps none between its calls, so that a held grant costs no more
// than its state (one process may hold 100,000 through a lock.Keeper), and
// reusing them keeps the calls from allocating one each.
var calls = sync.Pool{New: func() any { return new([callArgs]any) }}

// getCall returns an empty argument array from the pool.
func getCall() *[callArgs]any { return calls.Get().(*[callArgs]any) }

// putCall gives a back once its call has returned with ctx still live.
// When ctx has ended the call may have returned before the command did
// (a context-bound call goes on in a goroutine of its own: see
// internal/rediscall), which may still read a: it is left to the
// collector.
func putCall(ctx context.Context, a *[callArgs]any) {
	if ctx.Err() != nil {
		return
	}
	clear(a[:])
	calls.Put(a)
}
