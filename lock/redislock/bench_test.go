package redislock_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/redislock"
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

// BenchmarkReplicaAcks is the cost of WithReplicaAcks: uncontended
// TryAcquire + Release on a primary with one replica (and its Sentinels),
// without acks and with one ack, in one run, beside one PING (a loopback
// round trip). It reports the median of each (p50-µs): the target is that
// acks add less than one round trip at p50.
func BenchmarkReplicaAcks(b *testing.B) {
	redis.SetLogger(quiet{}) // the failover client logs each Sentinel it asks, amid the results
	srv := testenv.NewRedis(b, testenv.Replicas(1), testenv.Sentinels(3))
	ctx := context.Background()
	run := func(b *testing.B, op func() error) {
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			if err := op(); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/1e3, "p50-µs")
	}
	for _, acks := range []int{0, 1} {
		b.Run("acks="+strconv.Itoa(acks), func(b *testing.B) {
			var opts []redislock.Option
			if acks > 0 {
				opts = append(opts, redislock.WithReplicaAcks(acks, time.Second))
			}
			l := newLock(b, srv.FailoverClient(b), opts...)
			key := "bench:acks:" + strconv.Itoa(acks)
			run(b, func() error {
				h, err := l.TryAcquire(ctx, key, 30*time.Second)
				if err != nil {
					return err
				}
				return h.Release(ctx)
			})
		})
	}
	b.Run("ping", func(b *testing.B) {
		c := srv.FailoverClient(b)
		run(b, func() error { return c.Ping(ctx).Err() })
	})
}

// quiet is a go-redis logger that drops what it is given.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// contendedGrants runs workers goroutines, each on a Lock of its own (its
// own client and subscription), that take key with lock.Acquire and
// release it, until grants grants were made in all, and returns the heap
// bytes and allocations of the whole process (servers' listeners
// included) per grant.
func contendedGrants(tb testing.TB, addr string, workers, grants int) (bytes, allocs float64) {
	ctx := context.Background()
	key := "bench:contended:" + lock.NewOwner()
	locks := make([]*redislock.Lock, workers)
	for i := range locks {
		locks[i] = newLock(tb, newClient(tb, addr))
		// Open the subscription and the pool's connection first.
		h, err := lock.Acquire(ctx, locks[i], key, time.Minute)
		if err != nil {
			tb.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	var left atomic.Int64
	left.Store(int64(grants))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for _, l := range locks {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				h, err := lock.Acquire(ctx, l, key, time.Minute)
				if err == nil {
					err = h.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	n := float64(grants)
	return float64(after.TotalAlloc-before.TotalAlloc) / n, float64(after.Mallocs-before.Mallocs) / n
}

// BenchmarkRedisContended: 16 workers, each with a Lock of its own, take
// one key in turn with lock.Acquire (waiting in the key's queue) and
// release it; b.N grants in all. Reports the client's heap bytes and
// allocations per grant (B/grant, allocs/grant), as bench's
// BenchmarkContended/redis does per library.
func BenchmarkRedisContended(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	b.ReportAllocs()
	bytes, allocs := contendedGrants(b, addr, 16, b.N)
	b.ReportMetric(bytes, "B/grant")
	b.ReportMetric(allocs, "allocs/grant")
}

// BenchmarkShared: a share's uncontended TryAcquireShared and Release
// beside TryAcquire and Release (locktest.BenchSharedAcquireRelease).
func BenchmarkShared(b *testing.B) {
	locktest.BenchSharedAcquireRelease(b, newLock(b, newClient(b, testenv.Redis(b).Addr())))
}

// BenchmarkGroup4: an all-of grant of 4 keys and its release, one round
// trip each, beside 4 sequential TryAcquire and 4 Release
// (locktest.BenchGroup).
func BenchmarkGroup4(b *testing.B) {
	locktest.BenchGroup(b, newLock(b, newClient(b, testenv.Redis(b).Addr())), 4)
}

// BenchmarkReadersWriter: 8 readers and 1 writer on one key, each with a
// Lock (and client) of its own (locktest.BenchReadersWriter). Run it with
// -benchtime 10s.
func BenchmarkReadersWriter(b *testing.B) {
	addr := testenv.Redis(b).Addr()
	readers := make([]lock.SharedLock, 8)
	for i := range readers {
		readers[i] = newLock(b, newClient(b, addr))
	}
	locktest.BenchReadersWriter(b, readers, newLock(b, newClient(b, addr)))
}
