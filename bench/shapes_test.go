package bench

import (
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// BenchmarkShapes measures the lock shapes beside the exclusive lease, per
// backend, through lock/locktest's helpers: a shared acquire+release
// against an exclusive one ("acquire-release/shared", ".../exclusive"), an
// all-of grant of 4 keys against 4 sequential acquires ("group=4/all-of",
// ".../sequential"), and 8 readers re-acquiring one key back to back beside
// 1 writer ("readers=8"; run it with -benchtime 10s: it reports reader and
// writer grants/s and the writer's longest wait).
func BenchmarkShapes(b *testing.B) {
	for _, kind := range []func(testing.TB) backends.Backend{backends.Redis, backends.Postgres, backends.Etcd, backends.Memlock} {
		be := kind(b)
		b.Run(be.Name, func(b *testing.B) {
			b.Run("acquire-release", func(b *testing.B) {
				locktest.BenchSharedAcquireRelease(b, be.New(b).(lock.SharedLock))
			})
			b.Run("group=4", func(b *testing.B) {
				locktest.BenchGroup(b, be.New(b).(lock.GroupLock), 4)
			})
			b.Run("readers=8", func(b *testing.B) {
				readers := make([]lock.SharedLock, 8)
				for i := range readers {
					readers[i] = be.New(b).(lock.SharedLock)
				}
				locktest.BenchReadersWriter(b, readers, be.New(b).(lock.SharedLock))
			})
		})
	}
}
