package memlock

import (
	"context"
	"slices"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// queued is one caller waiting in a key's queue.
type queued struct {
	l      *Lock         // the instance that waits: the grant is its owner's
	ttl    time.Duration // the grant's ttl
	handed chan *grant   // the grant, handed over by a release (buffered)
	wake   chan struct{} // it became the head: look at the key again (buffered)
}

// AcquireQueued implements lock.Queue: callers wait for a key first come,
// first served. While a caller waits, no new share of the key is made
// (TryAcquireShared), and the release of the last share hands it over. A release hands the key to the head of its queue at once
// (no caller can take it in between); a grant that expires is taken by
// the head when its ttl has passed.
func (l *Lock) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, lock.DefaultLimits); err != nil {
		return nil, err
	}
	start := time.Now()
	w := &queued{l: l, ttl: ttl, handed: make(chan *grant, 1), wake: make(chan struct{}, 1)}
	l.mu.Lock()
	if len(l.queues[key]) == 0 {
		if g, err := l.grantLocked(key, ttl, start); err == nil {
			l.mu.Unlock()
			l.metrics.Attempt(ctx, start, nil)
			return &handle{l: l, g: g}, nil
		}
	}
	l.queues[key] = append(l.queues[key], w)
	for {
		// The head takes an expired grant's key; everyone waits for a
		// handover, the current grant's expiry, or the end of ctx.
		now := time.Now()
		if q := l.queues[key]; len(q) > 0 && q[0] == w {
			if g, err := l.grantLocked(key, ttl, now); err == nil {
				l.dequeueLocked(key, w)
				l.mu.Unlock()
				l.metrics.Attempt(ctx, start, nil)
				return &handle{l: l, g: g}, nil
			}
		}
		wait := time.Hour
		if g, ok := l.grants[key]; ok && now.Before(g.expires) {
			wait = g.expires.Sub(now)
		} else if last := l.liveSharesLocked(key, now); !last.IsZero() {
			wait = last.Sub(now) // no new share is made while we wait
		}
		l.mu.Unlock()
		timer := time.NewTimer(wait)
		select {
		case g := <-w.handed:
			timer.Stop()
			l.metrics.Attempt(ctx, start, nil)
			return &handle{l: l, g: g}, nil
		case <-timer.C:
		case <-w.wake:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			l.mu.Lock()
			l.dequeueLocked(key, w)
			l.mu.Unlock()
			select {
			case g := <-w.handed: // handed over as ctx ended: give it back
				_ = (&handle{l: l, g: g}).Release(context.WithoutCancel(ctx))
			default:
			}
			err := context.Cause(ctx)
			l.metrics.Attempt(ctx, start, err)
			return nil, err
		}
		l.mu.Lock()
	}
}

// Waiting implements lock.Queue.
func (l *Lock) Waiting(ctx context.Context, key string) (int, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queues[key]), nil
}

// dequeueLocked removes w from key's queue, if it is there. When w was the
// head, the new head is woken to look at the key again: the key's grant
// may be one it has not seen (the one w just took), whose expiry it must
// wait for.
func (l *Lock) dequeueLocked(key string, w *queued) {
	q := l.queues[key]
	i := slices.Index(q, w)
	if i < 0 {
		return
	}
	q = slices.Delete(slices.Clone(q), i, i+1)
	if len(q) == 0 {
		delete(l.queues, key)
		return
	}
	l.queues[key] = q
	if i == 0 {
		l.wakeHeadLocked(key)
	}
}

// wakeHeadLocked tells the head of key's queue, if any, to look at the key
// again: what it waits for has changed.
func (l *Lock) wakeHeadLocked(key string) {
	if q := l.queues[key]; len(q) > 0 {
		select {
		case q[0].wake <- struct{}{}:
		default: // already told
		}
	}
}

// handOverLocked grants a free key to the head of its queue, if any, and
// reports whether it did.
func (l *Lock) handOverLocked(key string, now time.Time) bool {
	q := l.queues[key]
	if len(q) == 0 {
		return false
	}
	w := q[0]
	g, err := w.l.grantLocked(key, w.ttl, now)
	if err != nil {
		return false
	}
	l.dequeueLocked(key, w)
	w.handed <- g
	return true
}

// Claim implements lock.Claimer: a grant that nothing releases, which
// lapses after ttl. It holds nothing in memory beyond its entry, so it is
// TryAcquire without a handle.
func (l *Lock) Claim(ctx context.Context, key string, ttl time.Duration) (uint64, error) {
	if err := backendkit.Validate(ctx, key, ttl, lock.DefaultLimits); err != nil {
		return 0, err
	}
	start := time.Now()
	l.mu.Lock()
	g, err := l.grantLocked(key, ttl, start)
	l.mu.Unlock()
	l.metrics.Attempt(ctx, start, err)
	if err != nil {
		return 0, err
	}
	return g.token, nil
}
