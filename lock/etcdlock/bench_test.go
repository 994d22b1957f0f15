package etcdlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// BenchmarkEtcdFloor is the raw two-round-trip floor of an etcd lock: a
// Txn that puts the key if it does not exist, then a delete. No lease, no
// fencing, no checks.
func BenchmarkEtcdFloor(b *testing.B) {
	c := newClient(b, testenv.Etcd(b).Endpoints())
	ctx := context.Background()
	key := "bench/floor/" + b.Name()
	for b.Loop() {
		r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "x")).Commit()
		if err != nil || !r.Succeeded {
			b.Fatal(r, err)
		}
		if _, err := c.Delete(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEtcdMutex is etcd's own lock, the reference: concurrency.Mutex
// TryLock + Unlock within one session (its lease granted once, outside the
// loop).
func BenchmarkEtcdMutex(b *testing.B) {
	c := newClient(b, testenv.Etcd(b).Endpoints())
	s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "bench/mutex/"+b.Name())
	ctx := context.Background()
	for b.Loop() {
		if err := m.TryLock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEtcdTryAcquireRelease is the same work through etcdlock: a Txn
// that puts the grant key with a spare lease, then a delete of it; the
// lease goes back to the spares.
func BenchmarkEtcdTryAcquireRelease(b *testing.B) {
	locktest.BenchTryAcquireRelease(b, newLock(b, testenv.Etcd(b).Endpoints()))
}

// BenchmarkEtcdVsMutex interleaves etcdlock's TryAcquire+Release with
// concurrency.Mutex's TryLock+Unlock op by op, so both see the same load on
// a shared machine (separate benchmarks, run one after the other, differ
// by ±20% from run to run here). It reports the median of each, in µs, and
// their ratio (etcdlock/mutex; the target is at most 1). ns/op is the pair.
func BenchmarkEtcdVsMutex(b *testing.B) {
	srv := testenv.Etcd(b)
	l := newLock(b, srv.Endpoints())
	s, err := concurrency.NewSession(newClient(b, srv.Endpoints()), concurrency.WithTTL(30))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "bench/mutex/"+b.Name())
	ctx := context.Background()
	key := "bench/vs/" + b.Name()
	ops := [2]func(){
		func() {
			h, err := l.TryAcquire(ctx, key, 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Release(ctx); err != nil {
				b.Fatal(err)
			}
		},
		func() {
			if err := m.TryLock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		},
	}
	var took [2][]time.Duration
	i := 0
	for b.Loop() {
		for j := range ops { // alternate which goes first
			k := (i + j) % 2
			start := time.Now()
			ops[k]()
			took[k] = append(took[k], time.Since(start))
		}
		i++
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	el, mu := median(took[0]), median(took[1])
	b.ReportMetric(el, "etcdlock-µs")
	b.ReportMetric(mu, "mutex-µs")
	b.ReportMetric(el/mu, "ratio")
}

// BenchmarkEtcdHandoff: release → a goroutine blocked in lock.Acquire on
// another Lock instance (its own client and watch) holds the key.
func BenchmarkEtcdHandoff(b *testing.B) {
	srv := testenv.Etcd(b)
	locktest.BenchHandoff(b, newLock(b, srv.Endpoints()), newLock(b, srv.Endpoints()))
}

// BenchmarkEtcdHandoffProcess: the same, to a child process blocked in
// lock.Acquire. Run with a fixed count: -benchtime 30x.
func BenchmarkEtcdHandoffProcess(b *testing.B) {
	srv := testenv.Etcd(b)
	locktest.BenchHandoffProcess(b, newLock(b, srv.Endpoints()), srv.Env())
}

// BenchmarkEtcdShared: TryAcquireShared+Release against TryAcquire+Release.
func BenchmarkEtcdShared(b *testing.B) {
	locktest.BenchSharedAcquireRelease(b, newLock(b, testenv.Etcd(b).Endpoints()))
}

// BenchmarkEtcdGroup4: TryAcquireAll of 4 keys (one Txn) + Release (one
// Txn) against 4 sequential TryAcquire + Release.
func BenchmarkEtcdGroup4(b *testing.B) {
	locktest.BenchGroup(b, newLock(b, testenv.Etcd(b).Endpoints()), 4)
}

// BenchmarkEtcdReadersWriter: 8 readers and 1 writer on one key, each on
// its own Lock (client and watch). Run with -benchtime 10s.
func BenchmarkEtcdReadersWriter(b *testing.B) {
	srv := testenv.Etcd(b)
	readers := make([]lock.SharedLock, 8)
	for i := range readers {
		readers[i] = newLock(b, srv.Endpoints())
	}
	locktest.BenchReadersWriter(b, readers, newLock(b, srv.Endpoints()))
}
