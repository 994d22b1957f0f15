package redislock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// attempts counts the acquire scripts a client runs.
type attempts struct{ n atomic.Int64 }

func (a *attempts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a *attempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (a *attempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (args[1] == acquireScript.Hash() || args[1] == acquireSrc) {
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

// lock.Acquire on Redis waits in the key's queue: a release wakes the
// first waiters of the queue, not all of them, so a chain of handoffs
// through eight waiters costs about two attempts each (broadcast wake-ups
// cost 8 + 7 + ... + 1), and nothing stays queued afterwards.
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
	var wg sync.WaitGroup
	for range waiters {
		w := newLock()
		wg.Go(func() {
			h, err := lock.Acquire(ctx, w, key, 30*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			_ = h.Release(ctx)
		})
	}
	for q, _ := queueLen(t, c, holder, key); q < waiters; q, _ = queueLen(t, c, holder, key) {
		if err := lock.Sleep(ctx, 5*time.Millisecond); err != nil {
			t.Fatalf("%d waiters queued: %v", q, err)
		}
	}
	before := count.n.Load()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	n := count.n.Load() - before
	t.Logf("%d attempts for %d handoffs", n, waiters)
	if n > 3*waiters {
		t.Fatalf("%d attempts for %d handoffs: releases wake more than the head of the queue", n, waiters)
	}
	if q, d := queueLen(t, c, holder, key); q != 0 || d != 0 {
		t.Fatalf("after the handoffs: %d queued, %d deadlines; want none", q, d)
	}
}

// A release skips (and drops) waiters that stopped trying, and wakes the
// live one behind them; a cancelled waiter leaves the queue.
func TestAcquireQueuedSkipsGoneWaiters(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "queued/" + t.Name()
	h, err := l.TryAcquire(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
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
		if err := lock.Sleep(ctx, 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	giveUp()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if _, d := queueLen(t, c, l, key); d != 2 {
		t.Fatalf("%d deadlines after a waiter gave up, want the 2 ghosts'", d)
	}
	got := make(chan error, 1)
	go func() {
		h, err := lock.Acquire(ctx, l, key, 30*time.Second)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	for q, _ := queueLen(t, c, l, key); q < 4; q, _ = queueLen(t, c, l, key) {
		if err := lock.Sleep(ctx, 5*time.Millisecond); err != nil {
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
	expiry := crashed.ValidUntil().Add(lock.DriftAllowance(ttl))
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
