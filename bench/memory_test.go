package bench

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// memoryBackend is one backend of BenchmarkMemory and how many leases and
// waiters it holds at once.
type memoryBackend struct {
	kind func(testing.TB) backends.Backend
	n    int
}

// memoryBackends: every backend holds 1,000 (100 under -short) except
// PostgreSQL, where a grant and a waiter each hold a pooled session: its
// instances have pools of 32 connections, so it holds 24.
func memoryBackends() map[string]memoryBackend {
	n := workload(1000, 100)
	return map[string]memoryBackend{
		"memlock":  {backends.Memlock, n},
		"redis":    {backends.Redis, n},
		"postgres": {backends.Postgres, 24},
		"etcd":     {backends.Etcd, n},
	}
}

// footprint is what the process holds at one moment: its live heap after
// a collection and its goroutines. (Stacks are left out: the collection
// shrinks the stacks of other goroutines, which makes the growth of
// StackInuse noise; each goroutine counted holds one.)
type footprint struct{ heap, goroutines float64 }

func measure() footprint {
	runtime.GC()
	runtime.GC() // the first may leave finalizers' objects for the second
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return footprint{float64(ms.HeapAlloc), float64(runtime.NumGoroutine())}
}

// report gives what each of n items added between before and f, in the
// units the report reads: heap-B/<item> and goroutines/<item>.
func (f footprint) report(b *testing.B, before footprint, n int, item string) {
	b.ReportMetric((f.heap-before.heap)/float64(n), "heap-B/"+item)
	b.ReportMetric((f.goroutines-before.goroutines)/float64(n), "goroutines/"+item)
}

// BenchmarkMemory: what one process holds per lease kept alive by
// lock.Keep (handle, renewal goroutine, timers, the client's share) and
// per caller blocked in lock.Acquire on a held key, on each backend: the
// growth of the live heap after a collection and of the goroutine count
// while N leases (or N waiters) are held, over N. N is 1,000 (100 under -short), 24 on PostgreSQL (see
// memoryBackends). The leases and the waiters each use one instance, as
// one process would. Run with -benchtime 1x:
//
//	go -C bench test -run '^$' -bench '^BenchmarkMemory$' -benchtime 1x
func BenchmarkMemory(b *testing.B) {
	for _, name := range []string{"memlock", "redis", "postgres", "etcd"} {
		mb := memoryBackends()[name]
		be := mb.kind(b)
		b.Run(name+"/lease", func(b *testing.B) {
			for b.Loop() {
				memoryOfLeases(b, be.New(b), mb.n)
			}
		})
		b.Run(name+"/waiter", func(b *testing.B) {
			for b.Loop() {
				memoryOfWaiters(b, be.New(b), be.New(b), mb.n)
			}
		})
	}
}

func memoryOfLeases(b *testing.B, l lock.Lock, n int) {
	ctx := context.Background()
	prefix := uniqueKey("bench/memory/lease")
	// Warm the instance (connections, scripts, subscriptions) so that
	// its fixed cost is not charged to the leases.
	h, err := l.TryAcquire(ctx, prefix+"/warm", ttl)
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		b.Fatal(err)
	}
	before := measure()
	leases := make([]*lock.Lease, 0, n)
	defer func() {
		for _, le := range leases {
			_ = le.Release(ctx)
		}
	}()
	for i := range n {
		h, err := l.TryAcquire(ctx, prefix+"/"+strconv.Itoa(i), ttl)
		if err != nil {
			b.Fatal(err)
		}
		le, err := lock.Keep(ctx, h, ttl)
		if err != nil {
			_ = h.Release(ctx)
			b.Fatal(err)
		}
		leases = append(leases, le)
	}
	measure().report(b, before, n, "lease")
}

func memoryOfWaiters(b *testing.B, holder, waiter lock.Lock, n int) {
	ctx := context.Background()
	key := uniqueKey("bench/memory/waiter")
	h, err := holder.TryAcquire(ctx, key, ttl)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = h.Release(ctx) }()
	// Warm the waiting instance with a failed attempt.
	if _, err := waiter.TryAcquire(ctx, key, ttl); !errors.Is(err, lock.ErrNotAcquired) {
		b.Fatalf("TryAcquire of a held key: %v", err)
	}
	// blocked tells when every waiter is waiting: the server's queue holds
	// n (lock.Queue), or each has seen the key held once (a Waiter, which
	// then sleeps until a release is announced).
	var blocking lock.Lock = waiter
	q, queued := waiter.(lock.Queue)
	ob := &failures{Lock: waiter, n: n, all: make(chan struct{})}
	if w, ok := waiter.(lock.Waiter); ok && !queued {
		blocking = waiterFailures{ob, w}
	} else if !queued {
		blocking = ob
	}
	before := measure()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range n {
		wg.Go(func() {
			h, err := lock.Acquire(wctx, blocking, key, ttl)
			if err == nil {
				_ = h.Release(ctx)
				b.Error("a waiter got a held key")
			}
		})
	}
	if queued {
		locktest.WaitQueued(b, q, key, n, time.Minute)
	} else {
		select {
		case <-ob.all:
		case <-time.After(time.Minute):
			b.Fatalf("fewer than %d waiters blocked after a minute", n)
		}
	}
	measure().report(b, before, n, "waiter")
}

// failures is a Lock that closes all once n of its TryAcquire calls have
// found the key held.
type failures struct {
	lock.Lock
	mu  sync.Mutex
	n   int
	all chan struct{}
}

func (f *failures) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := f.Lock.TryAcquire(ctx, key, ttl)
	if errors.Is(err, lock.ErrNotAcquired) {
		f.mu.Lock()
		if f.n--; f.n == 0 {
			close(f.all)
		}
		f.mu.Unlock()
	}
	return h, err
}

// waiterFailures is failures that keeps its Lock's release notifications.
type waiterFailures struct {
	*failures
	lock.Waiter
}
