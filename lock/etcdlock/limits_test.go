package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// TryAcquireAny over more keys than one Txn may hold on a server with the
// default --max-txn-ops (128, so 64 nested keys): every key but one is
// held, and the free one is granted whatever the random start. It was
// refused by the server ("too many operations in txn request") as
// ErrUnavailable, which waiters retry forever.
func TestTryAcquireAnyBeyondOneTxn(t *testing.T) {
	srv := testenv.Etcd(t)
	a, b := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 150
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", t.Name(), i)
	}
	free := n - 7
	for i, k := range keys {
		if i == free {
			continue
		}
		h, err := a.TryAcquire(ctx, k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(context.Background())
	}
	for range 5 {
		h, err := b.TryAcquireAny(ctx, keys, time.Minute)
		if err != nil {
			t.Fatalf("TryAcquireAny over %d keys, one free: %v", n, err)
		}
		if h.Key() != keys[free] {
			t.Fatalf("granted %q, the free key is %q", h.Key(), keys[free])
		}
		// All held now: not acquired, with a hint, never unavailable.
		_, err = b.TryAcquireAny(ctx, keys, time.Minute)
		if !errors.Is(err, lock.ErrNotAcquired) || lock.RemainingTTL(err) <= 0 {
			t.Fatalf("TryAcquireAny with every key held: %v (hint %v), want ErrNotAcquired with a hint", err, lock.RemainingTTL(err))
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Exactly lock.MaxKeys keys, all free.
	many := make([]string, lock.MaxKeys)
	for i := range many {
		many[i] = fmt.Sprintf("%s/many/%d", t.Name(), i)
	}
	h, err := b.TryAcquireAny(ctx, many, time.Minute)
	if err != nil {
		t.Fatalf("TryAcquireAny over MaxKeys free keys: %v", err)
	}
	_ = h.Release(ctx)
}
