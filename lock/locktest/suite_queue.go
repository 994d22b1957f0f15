package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// queue checks a lock.Queue through lock.Acquire, the path callers take:
// queued waiters are counted by Waiting, a release hands the key to one of
// them long before the holder's ttl, the other stays queued and gets the
// next release, and a cancelled waiter leaves the queue holding nothing.
func (s *suite) queue(t *testing.T) {
	probe := s.newLock(t)
	if _, ok := probe.(lock.Queue); !ok {
		t.Skipf("%T does not implement lock.Queue", probe)
	}
	a := s.newLock(t)
	q := a.(lock.Queue)
	key := s.key(t, "k")
	h := s.mustAcquire(t, a, key, s.cfg.longTTL)

	type result struct {
		h   lock.Handle
		err error
	}
	wait := func(ctx context.Context) chan result {
		c := make(chan result, 1)
		l := s.newLock(t)
		go func() {
			h, err := lock.Acquire(ctx, l, key, s.cfg.longTTL)
			c <- result{h, err}
		}()
		return c
	}
	first := wait(ctxFor(t, s.cfg.waitBound))
	WaitQueued(t, q, key, 1, s.cfg.waitBound)
	second := wait(ctxFor(t, s.cfg.waitBound))
	WaitQueued(t, q, key, 2, s.cfg.waitBound)

	next := func(what string) (lock.Handle, chan result) {
		t.Helper()
		select {
		case r := <-first:
			if r.err != nil {
				t.Fatalf("%s: queued Acquire: %v", what, r.err)
			}
			return r.h, second
		case r := <-second:
			if r.err != nil {
				t.Fatalf("%s: queued Acquire: %v", what, r.err)
			}
			return r.h, first
		case <-time.After(s.cfg.longTTL / 2):
			t.Fatalf("%s: no queued waiter got the key within %v (ttl %v)", what, s.cfg.longTTL/2, s.cfg.longTTL)
		}
		return nil, nil
	}
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	got, other := next("first release")
	WaitQueued(t, q, key, 1, s.cfg.waitBound) // the other is still queued
	select {
	case r := <-other:
		t.Fatalf("a second waiter returned while the first held the key: %v", r.err)
	default:
	}

	// A cancelled waiter leaves the queue and holds nothing.
	ctx, cancel := context.WithCancel(context.Background())
	third := wait(ctx)
	WaitQueued(t, q, key, 2, s.cfg.waitBound)
	cancel()
	if r := <-third; !errors.Is(r.err, context.Canceled) {
		if r.h != nil {
			_ = r.h.Release(context.Background())
		}
		t.Fatalf("cancelled queued Acquire: %v, want context.Canceled", r.err)
	}
	WaitQueued(t, q, key, 1, s.cfg.waitBound)

	if err := got.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	first, second = other, nil
	last, _ := next("second release")
	WaitQueued(t, q, key, 0, s.cfg.waitBound)
	if err := last.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// WaitQueued returns once q reports n waiters queued for key, and fails t
// if that does not happen within bound. Tests and benchmarks use it to know
// that a waiter is blocked in the queue before they release.
func WaitQueued(t testing.TB, q lock.Queue, key string, n int, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		got, err := q.Waiting(ctxFor(t, 10*time.Second), key)
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued for %q after %v, want %d (err %v)", got, key, bound, n, err)
		}
		time.Sleep(time.Millisecond) // polling with a bound
	}
}
