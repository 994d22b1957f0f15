package memlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Waiters get the key in the order they queued: a release hands it to the
// head; a waiter whose context ends leaves the queue; a crashed holder's
// grant goes to the head when it expires.
func TestQueueIsFirstComeFirstServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx := t.Context()
		h, _ := l.TryAcquire(ctx, "k", time.Minute)
		type result struct {
			who int
			h   lock.Handle
		}
		got := make(chan result, 3)
		gone, leave := context.WithCancel(ctx)
		for i := range 3 {
			wctx := ctx
			if i == 1 {
				wctx = gone
			}
			go func() {
				w, err := testkit.Must(l.Share()).AcquireQueued(wctx, "k", time.Minute)
				if err != nil {
					got <- result{who: -i - 1}
					return
				}
				got <- result{i, w}
			}()
			synctest.Wait() // queued, in order
		}
		if n, _ := l.Waiting(ctx, "k"); n != 3 {
			t.Fatalf("Waiting = %d, want 3", n)
		}
		leave()
		if r := <-got; r.who != -2 {
			t.Fatalf("the waiter whose context ended: %+v", r)
		}
		if _, err := testkit.Must(l.Share()).TryAcquire(ctx, "k", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while held: %v", err)
		}
		_ = h.Release(ctx)
		first := <-got
		if first.who != 0 {
			t.Fatalf("first handed to waiter %d, want 0", first.who)
		}
		// The head's holder crashes (never releases): the next waiter takes
		// the key when its grant expires, not before.
		start := time.Now()
		second := <-got
		if second.who != 2 || time.Since(start) != time.Minute {
			t.Fatalf("second: waiter %d after %v, want waiter 2 after 1m", second.who, time.Since(start))
		}
		if n, _ := l.Waiting(ctx, "k"); n != 0 {
			t.Fatalf("Waiting = %d at the end, want 0", n)
		}
	})
}

// A waiter that queued behind the head while the key's grant had expired
// (it found nothing to wait for) still gets the key when the grant that
// the head then took expires: the head's grant wakes the next waiter.
func TestQueueNextWaiterFollowsTheHeadsGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx := t.Context()
		a, _ := l.TryAcquire(ctx, "k", 2*time.Second)
		head := make(chan time.Time, 1)
		go func() {
			if _, err := testkit.Must(l.Share()).AcquireQueued(ctx, "k", time.Second); err == nil {
				head <- time.Now() // and never releases
			}
		}()
		synctest.Wait() // queued, its timer at a's expiry (2 s)
		// a shortens its grant: it expires at 1.5 s, the head wakes at 2 s.
		time.Sleep(time.Second)
		if err := a.Extend(ctx, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
		next := make(chan time.Time, 1)
		go func() {
			if _, err := testkit.Must(l.Share()).AcquireQueued(ctx, "k", time.Second); err == nil {
				next <- time.Now()
			}
		}()
		synctest.Wait() // queued behind the head, with nothing live to wait for
		start := time.Now().Add(-1700 * time.Millisecond)
		if at := (<-head).Sub(start); at != 2*time.Second {
			t.Fatalf("the head got the key at %v, want 2s", at)
		}
		select {
		case at := <-next:
			if d := at.Sub(start); d != 3*time.Second {
				t.Fatalf("the next waiter got the key at %v, want 3s (the head's grant's expiry)", d)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the next waiter did not get the key within a minute of the head's grant's expiry")
		}
	})
}
