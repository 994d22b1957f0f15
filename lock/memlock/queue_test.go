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
