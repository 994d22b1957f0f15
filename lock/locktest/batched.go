package locktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Batched returns a Factory whose Locks make every grant through a
// lock.Batch of newLock's backend: TryAcquire(ctx, key, ttl) goes to the
// instance's Batch of that ttl (made on first use, closed when the test
// ends). Run(t, Batched(f)) runs the conformance suite against batch
// grants. The backend must implement lock.Batcher, lock.Waiter and
// lock.Inspector; the Lock passes the Waiter, the Inspector, the owner and
// the limits on, and hides the other capabilities (queues, shares, groups:
// their grants are not a Batch's).
func Batched(newLock Factory) Factory {
	return func(t testing.TB) lock.Lock {
		l := newLock(t)
		bl, ok := l.(lock.Batcher)
		if !ok {
			t.Fatalf("locktest.Batched: %T is not a lock.Batcher", l)
		}
		w, ok := l.(lock.Waiter)
		if !ok {
			t.Fatalf("locktest.Batched: %T is not a lock.Waiter", l)
		}
		in, ok := l.(lock.Inspector)
		if !ok {
			t.Fatalf("locktest.Batched: %T is not a lock.Inspector", l)
		}
		b := &batchedLock{l: l, bl: bl, Waiter: w, Inspector: in, batches: map[time.Duration]lock.Batch{}}
		t.Cleanup(b.close)
		return b
	}
}

// batchedLock is a Lock whose grants are made by Batches, one per ttl.
type batchedLock struct {
	lock.Waiter
	lock.Inspector
	l  lock.Lock
	bl lock.Batcher

	mu      sync.Mutex
	batches map[time.Duration]lock.Batch
}

var (
	_ lock.Limited = (*batchedLock)(nil)
	_ lock.Owned   = (*batchedLock)(nil)
)

func (b *batchedLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	// The input is checked as the Lock would, before a Batch is made for
	// its ttl.
	if err := backendkit.Validate(ctx, key, ttl, lock.LimitsOf(b.l)); err != nil {
		return nil, err
	}
	b.mu.Lock()
	batch, ok := b.batches[ttl]
	if !ok {
		var err error
		if batch, err = b.bl.NewBatch(ctx, ttl); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		b.batches[ttl] = batch
	}
	b.mu.Unlock()
	return batch.TryAcquire(ctx, key)
}

func (b *batchedLock) Limits() lock.Limits { return lock.LimitsOf(b.l) }

func (b *batchedLock) Owner() string {
	if o, ok := b.l.(lock.Owned); ok {
		return o.Owner()
	}
	return ""
}

func (b *batchedLock) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, batch := range b.batches {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = batch.Close(ctx)
		cancel()
	}
}
