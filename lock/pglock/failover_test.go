package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// Across a failover to a synchronous standby (a crash of the primary,
// then promotion): every holder learns of its loss by its ValidUntil
// (its Lease's context ends with ErrLost, Release says ErrLost), and no
// key is granted again before then; tokens
// drawn after are larger than every token drawn before; claims made before
// are still there (no tick runs twice); a waiter blocked in the server's
// queue gets the key on the new primary; and the pool reaches the new
// primary without the application doing anything.
func TestFailoverToASynchronousStandby(t *testing.T) {
	srv := testenv.NewPostgres(t, testenv.Replicas(1))
	l := newLock(t, srv.DSN())
	ctx := t.Context()
	const ttl = 2 * time.Second
	var (
		leases []*lock.Lease
		top    uint64
	)
	for i := range 5 {
		h, err := l.TryAcquire(ctx, fmt.Sprintf("held-%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		lease, err := lock.Keep(ctx, h, ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
		top = max(top, h.Token())
	}
	var claims []string
	for i := range 5 {
		key := fmt.Sprintf("tick-%d", i)
		tok, err := lock.Claim(ctx, l, key, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, key)
		top = max(top, tok)
	}
	// A waiter queued on the server behind held-0's holder.
	var (
		wg        sync.WaitGroup
		waited    lock.Handle
		waitedErr error
	)
	var waitedAt time.Time
	wg.Go(func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		waited, waitedErr = lock.Acquire(wctx, l, "held-0", ttl)
		waitedAt = time.Now()
	})

	crashed := time.Now()
	srv.Failover(t, testenv.Crash)
	promoted := time.Now()
	// The new primary grants none of the lost holders' keys before their
	// ValidUntil (its quarantine): the ttls recorded on the old primary
	// reached the synchronous standby.
	if h, err := newLock(t, srv.DSN()).TryAcquire(ctx, "held-1", ttl); !errors.Is(err, lock.ErrNotAcquired) {
		if err == nil {
			_ = h.Release(ctx)
		}
		t.Fatalf("TryAcquire of a lost holder's key right after the failover: %v, want ErrNotAcquired (quarantine)", err)
	}
	var lastValid time.Time
	for _, lease := range leases {
		// Wait until 1 s past its ValidUntil at most, then look: when that
		// time has passed already, both channels are ready and select
		// would pick either (CI failed so, on a lease that had ended).
		select {
		case <-lease.Context().Done():
		case <-time.After(time.Until(lease.ValidUntil().Add(time.Second))):
		}
		if lease.Context().Err() == nil {
			t.Fatalf("lease of %s still running 1 s past its ValidUntil after the failover", lease.Handle().Key())
		}
		if !errors.Is(context.Cause(lease.Context()), lock.ErrLost) {
			t.Fatalf("lease of %s ended with %v, want ErrLost", lease.Handle().Key(), context.Cause(lease.Context()))
		}
		if err := lease.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("release of %s after the failover: %v, want ErrLost", lease.Handle().Key(), err)
		}
		if v := lease.ValidUntil(); v.After(lastValid) {
			lastValid = v
		}
	}
	t.Logf("crash at 0, promoted at %v", promoted.Sub(crashed).Round(time.Millisecond))

	wg.Wait()
	if waitedErr != nil {
		t.Fatalf("the waiter queued before the failover: %v", waitedErr)
	}
	if waitedAt.Before(lastValid) {
		t.Fatalf("the waiter was granted %v before the lost holder's ValidUntil", lastValid.Sub(waitedAt))
	}
	if waited.Token() <= top {
		t.Fatalf("the waiter's token %d after the failover, want above %d", waited.Token(), top)
	}
	_ = waited.Release(ctx)
	for i := 1; i < 5; i++ {
		h, err := l.TryAcquire(ctx, fmt.Sprintf("held-%d", i), ttl)
		if err != nil {
			t.Fatalf("held-%d after the failover: %v", i, err)
		}
		if h.Token() <= top {
			t.Fatalf("token %d after the failover, want above %d", h.Token(), top)
		}
		_ = h.Release(ctx)
	}
	for _, key := range claims {
		if _, err := lock.Claim(ctx, l, key, time.Hour); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("claim of %s after the failover: %v, want ErrNotAcquired (claimed before)", key, err)
		}
	}
}
