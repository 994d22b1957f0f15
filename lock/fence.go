package lock

import (
	"fmt"
	"sync"
)

// Fence is the in-process form of a fenced resource: it runs a write only if
// the writer's token is at least the highest token it has admitted, so a
// holder that lost its grant (paused past its ttl, cut off) cannot overwrite
// the work of its successor. The same grant may write any number of times.
//
// A resource outside the process does the same check atomically with the
// write: UPDATE t SET ..., fence = $token WHERE id = $id AND fence <= $token
// in SQL (zero rows updated means stale), or a Lua script in Redis that
// compares the stored token before it writes. The zero Fence is ready to use.
type Fence struct {
	mu      sync.Mutex
	highest uint64
}

// Do runs write under the fence if token is not stale and returns
// ErrStaleToken (with both tokens) otherwise.
func (f *Fence) Do(token uint64, write func()) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.highest {
		return fmt.Errorf("%w: token %d, resource already at %d", ErrStaleToken, token, f.highest)
	}
	f.highest = token
	if write != nil {
		write()
	}
	return nil
}

// Highest is the highest token admitted so far.
func (f *Fence) Highest() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest
}
