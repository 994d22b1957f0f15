package backends

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Probe is a backend instance that tells a test when one of its attempts
// was refused, so that the test can act once a waiter is demonstrably
// blocked (instead of guessing with a sleep). It forwards TryAcquire and
// the capabilities the tools use — MultiLock, Waiter, and the owner
// identity — to the instance it wraps.
type Probe struct {
	l lock.Lock
	m lock.MultiLock
	w lock.Waiter
	// Rejected receives a value for each attempt (TryAcquire or
	// TryAcquireAny) refused with lock.ErrNotAcquired; values are dropped
	// while 64 are unread.
	Rejected chan struct{}
}

// NewProbe wraps l, which must implement lock.MultiLock and lock.Waiter
// (every built-in backend does).
func NewProbe(t testing.TB, l lock.Lock) *Probe {
	t.Helper()
	m, isMulti := l.(lock.MultiLock)
	w, isWaiter := l.(lock.Waiter)
	if !isMulti || !isWaiter {
		t.Fatalf("%T lacks MultiLock or Waiter", l)
	}
	return &Probe{l: l, m: m, w: w, Rejected: make(chan struct{}, 64)}
}

func (p *Probe) observe(h lock.Handle, err error) (lock.Handle, error) {
	if errors.Is(err, lock.ErrNotAcquired) {
		select {
		case p.Rejected <- struct{}{}:
		default:
		}
	}
	return h, err
}

// TryAcquire implements lock.Lock.
func (p *Probe) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return p.observe(p.l.TryAcquire(ctx, key, ttl))
}

// TryAcquireAny implements lock.MultiLock.
func (p *Probe) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	return p.observe(p.m.TryAcquireAny(ctx, keys, ttl))
}

// Subscribe implements lock.Waiter.
func (p *Probe) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	return p.w.Subscribe(ctx, keys...)
}

// Owner is the wrapped instance's owner identity, if it has one: a Probe
// is lock.Owned as the instance it wraps is.
func (p *Probe) Owner() string { return backendkit.OwnerOf(p.l, "") }

// WaitRejected waits up to d for an attempt to be refused.
func (p *Probe) WaitRejected(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-p.Rejected:
	case <-time.After(d):
		t.Fatalf("no attempt was refused within %v", d)
	}
}
