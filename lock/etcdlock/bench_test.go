package etcdlock_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
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
// with a spare lease, then a revoke; a lease of its own per grant, granted
// in the background.
func BenchmarkEtcdTryAcquireRelease(b *testing.B) {
	locktest.BenchTryAcquireRelease(b, newLock(b, testenv.Etcd(b).Endpoints()))
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
