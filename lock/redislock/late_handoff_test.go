package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// waitFor polls cond every 5 ms until it holds, or fails t after bound.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		<-time.After(5 * time.Millisecond)
	}
}

// A handoff message that reaches a queued waiter late — after the grant
// it tells of expired and another client took the key, together with the
// reply to an attempt the server refused after the handoff — is no grant:
// the waiter waits on. It counted the handed grant's validity from that
// later attempt, and held the key while the other client did: chaos
// TestNemesisReadersWriter/redis, seed 107829, a writer's grant handed
// during a blackhole of 730 ms, "grant safety: worker 3 [...37.420905,
// ...] overlaps worker 0 [...37.514031, ...]". Or, when the message came
// first, its grant arrived dead and the Acquire failed (ErrUnavailable)
// though the waiter could have waited on.
func TestLateHandoffMessageIsNoGrant(t *testing.T) {
	srv := testenv.Redis(t)
	p := faultproxy.Start(t, srv.Addr())
	waiter := newLock(t, redis.NewClient(&redis.Options{Addr: p.Addr()}))
	holder := newLock(t, newClient(t, srv.Addr()))
	other := newLock(t, newClient(t, srv.Addr()))
	ctx := t.Context()
	key := testKey(t)
	const ttl = 2 * time.Second
	h, err := holder.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		h   lock.Handle
		err error
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan result, 1)
	go func() {
		h, err := waiter.AcquireQueued(wctx, key, ttl)
		got <- result{h, err}
	}()
	waitFor(t, 5*time.Second, "the waiter queued", func() bool {
		n, err := holder.Waiting(ctx, key)
		return err == nil && n == 1
	})
	p.SetMode(faultproxy.Blackhole) // the waiter's requests, replies and messages are held
	held := p.HeldRequests()
	if err := h.Release(ctx); err != nil { // handed to the waiter, whose message is held
		t.Fatal(err)
	}
	var x lock.Handle
	waitFor(t, 2*ttl, "the handed grant expired and another client took the key", func() bool {
		x, err = other.TryAcquire(ctx, key, time.Minute)
		return err == nil
	})
	defer func() { _ = x.Release(context.Background()) }()
	// The waiter tries again at least every second: an attempt is on its
	// way, which the server refuses once it arrives.
	waitFor(t, 3*time.Second, "an attempt of the waiter on its way", func() bool { return p.HeldRequests() > held })
	p.SetMode(faultproxy.Pass)
	select {
	case r := <-got:
		if r.h != nil {
			t.Fatalf("the waiter holds the key another client holds: token %d, valid until %v (now %v)", r.h.Token(), r.h.ValidUntil(), time.Now())
		}
		t.Fatalf("the waiter's AcquireQueued failed while the key was held: %v", r.err)
	case <-time.After(2 * time.Second): // it waits on, as it should
	}
	cancel()
	if r := <-got; r.h != nil || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the waiter's AcquireQueued, cancelled: %v, %v", r.h, r.err)
	}
}
