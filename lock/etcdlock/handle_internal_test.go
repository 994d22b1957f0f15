package etcdlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// After a lease swap whose outcome is unknown, the next Extend reads which
// lease the key is on, keeps it and revokes the other: both outcomes.
func TestSettleAnUnknownSwap(t *testing.T) {
	srv := testenv.Etcd(t)
	c := newClient(t, srv.Endpoints())
	l, err := New(c, WithMinTTL(time.Second), WithPrefix("/settle/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alive := func(id clientv3.LeaseID) bool {
		r, err := c.TimeToLive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.TTL > 0
	}
	waitRevoked := func(id clientv3.LeaseID) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); alive(id); {
			if time.Now().After(deadline) {
				t.Fatalf("lease %x still alive", id)
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	for _, moved := range []bool{false, true} {
		hd, err := l.TryAcquire(ctx, "k", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		h := hd.(*handle)
		old := h.lease
		s, err := l.grant(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		if moved { // the Txn took effect, but its reply was lost
			if _, err := c.Put(ctx, h.ekey, "", clientv3.WithLease(s.id), clientv3.WithIgnoreValue()); err != nil {
				t.Fatal(err)
			}
		}
		h.moving = &s
		ttl := 2 * time.Second
		if moved {
			ttl = 5 * time.Second
		}
		if err := h.Extend(ctx, ttl); err != nil {
			t.Fatalf("moved %v: Extend: %v", moved, err)
		}
		keep, drop := old, s
		if moved {
			keep, drop = s, old
		}
		if h.moving != nil || h.lease.id != keep.id {
			t.Fatalf("moved %v: after Extend the handle is on lease %x (moving %v), want %x", moved, h.lease.id, h.moving, keep.id)
		}
		waitRevoked(drop.id)
		if !alive(keep.id) {
			t.Fatalf("moved %v: the key's lease %x is gone", moved, keep.id)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A Txn of more keys than the server's --max-txn-ops allows is refused
// before it does anything: the Lock halves its batch and goes on, and
// keeps the smaller batch for the next calls.
func TestTxnBatchShrinksOnRefusal(t *testing.T) {
	srv := testenv.Etcd(t)
	l, err := New(newClient(t, srv.Endpoints()), WithMinTTL(time.Second), WithPrefix("/batch/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A batch of the full size, and one of fewer keys than the size.
	for _, c := range []struct{ batch, keys, want int32 }{{100, 120, 50}, {200, 100, 50}} {
		l.txnKeys.Store(c.batch) // more than the default --max-txn-ops (128) allows
		keys := make([]string, c.keys)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		h, err := l.TryAcquireAny(ctx, keys, time.Second)
		if err != nil {
			t.Fatalf("TryAcquireAny: %v", err)
		}
		_ = h.Release(ctx)
		if n := l.txnKeys.Load(); n != c.want {
			t.Fatalf("keys per Txn after a refusal of %d keys (batch %d): %d, want %d", c.keys, c.batch, n, c.want)
		}
	}
}

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
