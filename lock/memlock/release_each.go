package memlock

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var _ lock.EachReleaser = (*Lock)(nil)

// ReleaseEach implements lock.EachReleaser: every handle of this Lock
// (exclusive grants and shares) released in one pass under the Lock's
// mutex, each as its Release would (its queue's head handed the key, its
// subscribers woken). A handle of another Lock gets an error matching
// lock.ErrInvalidArgument, untouched (lock.ReleaseEach releases it on its
// own).
func (l *Lock) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	errs := make([]error, len(hs))
	if err := backendkit.CheckContext(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	now := time.Now()
	mine := make([]bool, len(hs))
	l.mu.Lock()
	for i, h := range hs {
		mh, ok := h.(*handle)
		if !ok || mh.l != l {
			errs[i] = fmt.Errorf("%w: memlock: ReleaseEach of a handle of another Lock (%T)", lock.ErrInvalidArgument, h)
			continue
		}
		mine[i] = true
		errs[i] = mh.releaseLocked(now)
	}
	l.mu.Unlock()
	for i, err := range errs {
		if mine[i] {
			l.metrics.Release(ctx, err)
		}
	}
	return errs
}

// releaseLocked is Release under the Lock's mutex: the grant is dropped
// (an expired entry of ours too) and the key handed on; ErrLost if it was
// gone.
func (h *handle) releaseLocked(now time.Time) error {
	var err error
	if h.released || !h.l.currentLocked(h.g, now) {
		err = h.lostLocked()
	}
	h.released = true
	h.l.removeLocked(h.g)
	return err
}
