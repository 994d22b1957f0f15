package redislock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// compareAndDelete is the release half of the raw floor.
var compareAndDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkRedisFloor is the raw two-round-trip floor of a Redis lock:
// SET NX PX, then a compare-and-delete script. No fencing, no checks.
func BenchmarkRedisFloor(b *testing.B) {
	c := newClient(b, testenv.Redis(b).Addr())
	ctx := context.Background()
	key := "bench:floor:" + b.Name()
	var i int
	for b.Loop() {
		i++
		v := strconv.Itoa(i)
		ok, err := c.SetNX(ctx, key, v, 30*time.Second).Result()
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := compareAndDelete.Run(ctx, c, []string{key}, v).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisTryAcquireRelease is the same work through redislock: one
// round trip each way, with fencing tokens and ownership checks.
func BenchmarkRedisTryAcquireRelease(b *testing.B) {
	srv := testenv.Redis(b)
	locktest.BenchTryAcquireRelease(b, newLock(b, newClient(b, srv.Addr())))
}

// BenchmarkRedisHandoff: release → a goroutine blocked in lock.Acquire on
// another Lock instance (its own client and subscription) holds the key.
func BenchmarkRedisHandoff(b *testing.B) {
	srv := testenv.Redis(b)
	locktest.BenchHandoff(b, newLock(b, newClient(b, srv.Addr())), newLock(b, newClient(b, srv.Addr())))
}

// BenchmarkRedisHandoffProcess: the same, to a child process blocked in
// lock.Acquire. Run with a fixed count: -benchtime 30x.
func BenchmarkRedisHandoffProcess(b *testing.B) {
	srv := testenv.Redis(b)
	locktest.BenchHandoffProcess(b, newLock(b, newClient(b, srv.Addr())), srv.Env())
}
