package etcdlock

import "sync"

// background runs a Lock's background requests (revokes and deletes of
// leftovers, spare lease grants, watches), which Close waits for. A
// request started once Close waits runs on its own goroutine, not waited
// for (it ends with the Lock's context or its own timeout): a
// sync.WaitGroup may not be added to while it is waited on, and a
// handle's Lost (a loss watch), Release or Extend may start one as the
// Lock closes (the race detector caught Lost against Close in leader's
// tests).
type background struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	closing bool
}

// Go runs f, in the group Wait waits for unless Wait has begun.
func (b *background) Go(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		go f()
		return
	}
	b.wg.Go(f)
}

// Wait waits for the requests started before it.
func (b *background) Wait() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	b.wg.Wait()
}
