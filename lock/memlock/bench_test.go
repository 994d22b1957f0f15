package memlock_test

import (
	"github.com/leasehold-go/leasehold/internal/testkit"
	"testing"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func BenchmarkMemlockTryAcquireRelease(b *testing.B) {
	locktest.BenchTryAcquireRelease(b, testkit.Must(memlock.New()))
}

func BenchmarkMemlockHandoff(b *testing.B) {
	l := testkit.Must(memlock.New())
	locktest.BenchHandoff(b, l, testkit.Must(l.Share()))
}

func BenchmarkMemlockShared(b *testing.B) {
	locktest.BenchSharedAcquireRelease(b, testkit.Must(memlock.New()))
}

func BenchmarkMemlockGroup4(b *testing.B) {
	locktest.BenchGroup(b, testkit.Must(memlock.New()), 4)
}

// BenchmarkMemlockReadersWriter: 8 readers and 1 writer on one key; run
// with -benchtime 10s for issue 19's figure.
func BenchmarkMemlockReadersWriter(b *testing.B) {
	l := testkit.Must(memlock.New())
	readers := make([]lock.SharedLock, 8)
	for i := range readers {
		readers[i] = testkit.Must(l.Share())
	}
	locktest.BenchReadersWriter(b, readers, testkit.Must(l.Share()))
}

// A Keeper's Close of 10,000 leases and 10,000 concurrent Lease.Release.
func BenchmarkMemlockKeeperRelease(b *testing.B) {
	locktest.BenchKeeperRelease(b, testkit.Must(memlock.New()), 10_000, nil)
}
