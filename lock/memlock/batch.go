package memlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var (
	_ lock.Batcher     = (*Lock)(nil)
	_ lock.EachClaimer = (*Lock)(nil)
)

// NewBatch implements lock.Batcher. A memlock batch shares nothing between
// its grants: TryAcquire is the Lock's, and Renew extends any handle of
// this Lock (a batch's or not) in one pass under the Lock's mutex.
func (l *Lock) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	if err := lock.DefaultLimits.CheckTTL(ttl); err != nil {
		return nil, err
	}
	return &batch{l: l, ttl: ttl}, nil
}

// batch is a memlock lock.Batch.
type batch struct {
	l      *Lock
	ttl    time.Duration
	closed atomic.Bool
}

var errBatchClosed = fmt.Errorf("%w: memlock: the batch is closed", lock.ErrInvalidArgument)

func (b *batch) TryAcquire(ctx context.Context, key string) (lock.Handle, error) {
	if b.closed.Load() {
		return nil, errBatchClosed
	}
	return b.l.TryAcquire(ctx, key, b.ttl)
}

// Renew extends every handle of hs for the batch's ttl, all under one
// hold of the Lock's mutex.
func (b *batch) Renew(ctx context.Context, hs []lock.Handle) []error {
	errs := make([]error, len(hs))
	if err := backendkit.CheckContext(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if b.closed.Load() {
		for i := range errs {
			errs[i] = errBatchClosed
		}
		return errs
	}
	now := time.Now()
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	for i, h := range hs {
		mh, ok := h.(*handle)
		switch {
		case !ok || mh.l != b.l:
			errs[i] = fmt.Errorf("%w: memlock: Renew of a handle of another Lock (%T)", lock.ErrInvalidArgument, h)
		case mh.released || !b.l.currentLocked(mh.g, now):
			errs[i] = mh.lostLocked()
		default:
			mh.g.expires = now.Add(b.ttl)
			b.l.wakeHeadLocked(mh.g.key)
		}
	}
	return errs
}

// Close ends the batch; its grants stay until released or expired.
func (b *batch) Close(context.Context) error {
	b.closed.Store(true)
	return nil
}

// ClaimEach implements lock.EachClaimer: every claim in one pass under
// the Lock's mutex.
func (l *Lock) ClaimEach(ctx context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	res := make([]lock.ClaimResult, len(reqs))
	start := time.Now()
	l.mu.Lock()
	for i, r := range reqs {
		if err := backendkit.Validate(ctx, r.Key, r.TTL, lock.DefaultLimits); err != nil {
			res[i].Err = err
			continue
		}
		g, err := l.grantLocked(r.Key, r.TTL, start)
		if err != nil {
			res[i].Err = err
			continue
		}
		res[i].Token = g.token
	}
	l.mu.Unlock()
	for _, r := range res {
		l.metrics.Attempt(ctx, start, r.Err)
	}
	return res
}
