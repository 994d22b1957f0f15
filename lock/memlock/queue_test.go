package memlock_test

import (
	"context"
	"errors"
	"fmt"
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

// A waiter that finds the key's grant expired while it is not the head
// (the head's timer and its own fire at the same instant, and it runs
// first) has nothing to wait for; when the head then takes the key itself
// and never releases it, the next waiter must still get the key at that
// grant's expiry. Which of the two runs first is the scheduler's choice:
// many rounds make the bad order certain.
func TestQueueNextWaiterFollowsTheHeadsGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx := t.Context()
		for round := range 50 {
			key := fmt.Sprint("k", round)
			_, _ = l.TryAcquire(ctx, key, time.Second) // abandoned
			got := make(chan time.Time, 2)
			for range 2 {
				go func() {
					if _, err := testkit.Must(l.Share()).AcquireQueued(ctx, key, time.Second); err == nil {
						got <- time.Now() // and never releases
					}
				}()
				synctest.Wait() // queued, its timer at the grant's expiry
			}
			start := time.Now()
			first := <-got
			select {
			case second := <-got:
				if d := second.Sub(first); d != time.Second {
					t.Fatalf("round %d: the second waiter got the key %v after the first, want 1s", round, d)
				}
			case <-time.After(time.Minute):
				t.Fatalf("round %d: the second waiter did not get the key within a minute of the first's grant (at %v)", round, first.Sub(start))
			}
		}
	})
}

// A holder that shortens its grant with Extend and then abandons it: the
// queued waiter gets the key at the new expiry, not the old one.
func TestQueueFollowsAShortenedGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx := t.Context()
		for _, shared := range []bool{false, true} {
			try := l.TryAcquire
			if shared {
				try = l.TryAcquireShared
			}
			h, _ := try(ctx, "k", time.Hour)
			got := make(chan lock.Handle, 1)
			go func() {
				w, _ := testkit.Must(l.Share()).AcquireQueued(ctx, "k", time.Minute)
				got <- w
			}()
			synctest.Wait()
			_ = h.Extend(ctx, time.Second)
			start := time.Now()
			w := <-got
			if d := time.Since(start); d != time.Second {
				t.Fatalf("shared %v: the queued waiter got the key %v after the Extend, want 1s", shared, d)
			}
			_ = w.Release(ctx)
		}
	})
}
