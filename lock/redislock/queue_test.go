package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// attempts counts the acquire scripts a client runs.
type attempts struct{ n atomic.Int64 }

func (a *attempts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a *attempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (a *attempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (args[1] == acquireScript.Hash() || args[1] == clockSrc+intentSrc+acquireSrc) {
			a.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func queueLen(t *testing.T, c *redis.Client, l *Lock, key string) (queued, deadlines int64) {
	t.Helper()
	ctx := context.Background()
	q, err := c.ZCard(ctx, l.queueKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.HLen(ctx, l.deadlinesKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return q, d
}

// lock.Acquire on Redis waits in the key's queue: a release hands the key
// to the first waiter of the queue, so a chain of handoffs through eight
// waiters costs no attempt at all (broadcast wake-ups cost 8 + 7 + ... +
// 1), the waiters get the key in their arrival order, and nothing stays
// queued afterwards.
func TestAcquireQueuedWakesTheHeadOfTheQueue(t *testing.T) {
	addr := testenv.Redis(t).Addr()
	count := &attempts{}
	c := redis.NewClient(&redis.Options{Addr: addr})
	c.AddHook(count)
	t.Cleanup(func() { _ = c.Close() })
	newLock := func() *Lock {
		l, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "queued/" + t.Name()
	holder := newLock()
	h, err := holder.TryAcquire(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		order []int
	)
	for i := range waiters {
		w := newLock()
		wg.Go(func() {
			h, err := lock.Acquire(ctx, w, key, 30*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = h.Release(ctx)
		})
		// Queue them one by one, so that the arrival order is known.
		for q, _ := queueLen(t, c, holder, key); q < int64(i+1); q, _ = queueLen(t, c, holder, key) {
			if err := backendkit.Sleep(ctx, time.Millisecond); err != nil {
				t.Fatalf("%d waiters queued: %v", q, err)
			}
		}
	}
	before := count.n.Load()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	n := count.n.Load() - before
	t.Logf("%d attempts for %d handoffs, order %v", n, waiters, order)
	// Each release hands the key on: no attempt is needed, bar a waiter's
	// own refresh of its place that happens to run meanwhile.
	if n > 2 {
		t.Fatalf("%d attempts for %d handoffs: releases do not hand the key on", n, waiters)
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("grants in the order %v, want the arrival order", order)
		}
	}
	if q, d := queueLen(t, c, holder, key); q != 0 || d != 0 {
		t.Fatalf("after the handoffs: %d queued, %d deadlines; want none", q, d)
	}
}

// heldKey returns a client, a Lock on it, a context of 20 s, and a key of
// the test that the Lock holds for ttl.
func heldKey(t *testing.T, ttl time.Duration) (*redis.Client, *Lock, context.Context, string, lock.Handle) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	key := "queued/" + t.Name()
	h, err := l.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return c, l, ctx, key, h
}

// A release skips (and drops) waiters that stopped trying, and hands the
// key to the live one behind them; a cancelled waiter leaves the queue.
func TestAcquireQueuedSkipsGoneWaiters(t *testing.T) {
	c, l, ctx, key, h := heldKey(t, 30*time.Second)
	// Two waiters that crashed: first in the queue, deadlines passed.
	for i, ghost := range []string{"ghost-1", "ghost-2"} {
		c.ZAdd(ctx, l.queueKey(key), redis.Z{Score: float64(i), Member: ghost})
		c.HSet(ctx, l.deadlinesKey(key), ghost, 1)
	}
	// One that gives up.
	gctx, giveUp := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := lock.Acquire(gctx, l, key, 30*time.Second)
		gaveUp <- err
	}()
	for q, _ := queueLen(t, c, l, key); q < 3; q, _ = queueLen(t, c, l, key) {
		if err := backendkit.Sleep(ctx, 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	giveUp()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if q, d := queueLen(t, c, l, key); q != 2 || d != 2 {
		t.Fatalf("%d queued, %d entries after a waiter gave up, want the 2 ghosts'", q, d)
	}
	got := make(chan error, 1)
	go func() {
		h, err := lock.Acquire(ctx, l, key, 30*time.Second)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	for q, _ := queueLen(t, c, l, key); q < 3; q, _ = queueLen(t, c, l, key) {
		if err := backendkit.Sleep(ctx, 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if q, d := queueLen(t, c, l, key); q != 0 || d != 0 {
		t.Fatalf("after the release: %d queued, %d deadlines; want the gone waiters dropped", q, d)
	}
}

// A release looks at ten queued entries at most. With the first ten
// lapsed (waiters that crashed, or could not leave), it drops them, hands
// the key to no one and announces the release: the live waiter behind
// them hears it and takes the key at once. It listened to its handoff
// alone, and slept until its periodic attempt, a second later (its
// context, 900 ms, ended first).
func TestAcquireQueuedBehindTenLapsedWaiters(t *testing.T) {
	c, l, ctx, key, h := heldKey(t, time.Minute)
	for i := range 10 {
		ghost := fmt.Sprint("ghost-", i)
		c.ZAdd(ctx, l.queueKey(key), redis.Z{Score: float64(i), Member: ghost})
		c.HSet(ctx, l.deadlinesKey(key), ghost, "1|60000|1|"+l.prefix+"inbox:none|someone")
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 900*time.Millisecond) // its next attempt: in a second
		defer cancel()
		h, err := l.AcquireQueued(wctx, key, time.Minute)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	for q, _ := queueLen(t, c, l, key); q < 11; q, _ = queueLen(t, c, l, key) {
		if err := backendkit.Sleep(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the live waiter behind ten lapsed ones: %v", err)
	}
}

// A queued waiter whose holder crashed (never releases) wakes by the
// remaining ttl its attempts report, not by a fixed poll: it gets the key
// right after the grant expires, after about one attempt per second of
// ttl (the attempts that keep its place in the queue) plus the last one.
func TestAcquireQueuedWakesWhenACrashedHoldersGrantExpires(t *testing.T) {
	addr := testenv.Redis(t).Addr()
	count := &attempts{}
	c := redis.NewClient(&redis.Options{Addr: addr})
	c.AddHook(count)
	t.Cleanup(func() { _ = c.Close() })
	holder, err := New(redis.NewClient(&redis.Options{Addr: addr}))
	if err != nil {
		t.Fatal(err)
	}
	waiter, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	ctx := t.Context()
	key := "queue/crashed-holder/" + attemptID()
	const ttl = 2500 * time.Millisecond
	crashed, err := holder.TryAcquire(ctx, key, ttl) // never released: the holder "crashed"
	if err != nil {
		t.Fatal(err)
	}
	expiry := crashed.ValidUntil().Add(backendkit.DriftAllowance(ttl))
	h, err := lock.Acquire(ctx, waiter, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := time.Now()
	defer func() { _ = h.Release(context.Background()) }()
	if late := got.Sub(expiry); late > 300*time.Millisecond {
		t.Errorf("granted %v after the crashed holder's grant expired, want within 300 ms", late)
	}
	if n := count.n.Load(); n > 5 {
		t.Errorf("%d attempts for a %v ttl: the waiter polled instead of waking by the remaining ttl", n, ttl)
	}
	t.Logf("granted %v after the expiry, %d attempts", got.Sub(expiry).Round(time.Millisecond), count.n.Load())
}

// A grant handed to a queued waiter: ValidUntil is conservative (not
// after the key's expiry on the server); a waiter that missed the message
// finds its grant at its next attempt, with ValidUntil from the remaining
// ttl; a waiter that leaves after it was handed the key releases it, and
// the key goes on to the next waiter.
func TestHandoffToAWaiterThatMissedItOrLeft(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "queued/" + t.Name() + "/" + attemptID()
	const ttl = 10 * time.Second
	holder, err := l.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	expiryBound := func(h lock.Handle) {
		t.Helper()
		pttl, err := c.PTTL(ctx, l.lockKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if vu, limit := h.ValidUntil(), time.Now().Add(pttl); vu.After(limit) {
			t.Fatalf("ValidUntil %v is after the key's expiry on the server (%v)", vu, limit)
		}
	}

	// A waiter that will miss the message: queued by an attempt, never
	// listening.
	const ghost = "ghost"
	if _, err := l.acquire(ctx, []string{key}, ttl, 0, ghost); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("queued attempt on a held key: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g, held, err := l.Inspect(ctx, key)
	if err != nil || !held || g.Owner != l.owner {
		t.Fatalf("after the release: %+v held %v err %v, want the ghost waiter's grant", g, held, err)
	}
	// Its next attempt finds the grant.
	h, err := l.acquire(ctx, []string{key}, ttl, 0, ghost)
	if err != nil {
		t.Fatalf("the next attempt of a waiter that missed its handoff: %v", err)
	}
	if h.Token() != g.Token {
		t.Fatalf("token %d, want the handed grant's %d", h.Token(), g.Token)
	}
	expiryBound(h)

	// A live waiter queued behind a second ghost that leaves after the
	// handoff: the ghost's leave hands the key on to it.
	if _, err := l.acquire(ctx, []string{key}, ttl, 0, ghost+"-2"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("queued attempt on a held key: %v", err)
	}
	got := make(chan lock.Handle, 1)
	go func() {
		h, err := l.AcquireQueued(ctx, key, ttl)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	for q, _ := queueLen(t, c, l, key); q < 2; q, _ = queueLen(t, c, l, key) {
		if err := backendkit.Sleep(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Release(ctx); err != nil { // hands the key to ghost-2
		t.Fatal(err)
	}
	if g, _, _ := l.Inspect(ctx, key); g.Token <= h.Token() {
		t.Fatalf("after the release the key is not handed on: %+v", g)
	}
	n, err := l.run(ctx, leaveScript, l.queueKeys(key), ghost+"-2", l.channel, key, ms(fenceLifetime)).Int()
	if err != nil || n != 1 {
		t.Fatalf("leave of a waiter that was handed the key: %d, %v; want 1 (released)", n, err)
	}
	live := <-got
	if live == nil {
		t.FailNow()
	}
	expiryBound(live)
	if err := live.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q, d := queueLen(t, c, l, key); q != 0 || d != 0 {
		t.Fatalf("%d queued, %d entries left", q, d)
	}
}
