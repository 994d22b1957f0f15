package redislock

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// A live waiter in the key's queue (a writer: only AcquireQueued queues)
// refuses new shares even when the key is free (its holder's grant
// expired and the waiter has not tried again yet), for as long as the
// waiter keeps its place; a waiter whose place lapsed does not.
func TestQueuedWriterRefusesShares(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	key := "shared/" + t.Name() + "/" + lock.NewOwner()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	queue := func(deadline time.Time) {
		t.Helper()
		entry := strconv.FormatInt(deadline.UnixMilli(), 10) + "|60000|" + strconv.FormatInt(now.UnixMilli(), 10) + "|inbox|writer"
		if err := c.ZAdd(ctx, l.queueKey(key), redis.Z{Score: 1, Member: "w"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, l.deadlinesKey(key), "w", entry).Err(); err != nil {
			t.Fatal(err)
		}
	}
	queue(now.Add(-time.Second)) // lapsed
	h, err := l.TryAcquireShared(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("TryAcquireShared behind a lapsed waiter: %v", err)
	}
	_ = h.Release(ctx)
	queue(now.Add(time.Minute))
	_, err = l.TryAcquireShared(ctx, key, time.Minute)
	if r := lock.RemainingTTL(err); !errors.Is(err, lock.ErrNotAcquired) || r < 50*time.Second || r > time.Minute+time.Second {
		t.Fatalf("TryAcquireShared behind a queued writer: %v (remaining %v), want refused for about a minute", err, lock.RemainingTTL(err))
	}
}
