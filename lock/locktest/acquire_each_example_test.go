package locktest_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// A backend's check of lock.TryAcquireAnyEach, beside its conformance
// test. Compile-only, as ExampleRun: go test hands an example no
// *testing.T.
func ExampleRunAcquireEach() {
	TestAcquireEach := func(t *testing.T) {
		shared, err := memlock.New()
		if err != nil {
			t.Fatal(err)
		}
		// Each instance stands for one process; they share one table.
		var newLock locktest.Factory = func(t testing.TB) lock.Lock {
			l, err := shared.Share()
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		t.Run("Native", func(t *testing.T) { locktest.RunAcquireEach(t, newLock) })
		// Through the generic path: a Lock that is only a lock.Lock.
		t.Run("Generic", func(t *testing.T) {
			locktest.RunAcquireEach(t, func(t testing.TB) lock.Lock { return struct{ lock.Lock }{newLock(t)} })
		})
	}
	_ = TestAcquireEach
}

// A backend whose grants each hold a connection of a small pool checks
// TryAcquireAnyEach with fewer requests per call. Compile-only.
func ExampleWithEachRequests() {
	TestAcquireEach := func(t *testing.T, newLock locktest.Factory) {
		locktest.RunAcquireEach(t, newLock, locktest.WithEachRequests(12))
	}
	_ = TestAcquireEach
}

// A backend's benchmark of TryAcquireAnyEach: 1,000 pools of 4 keys.
// Compile-only: go test hands an example no *testing.B.
func ExampleBenchAcquireEach() {
	BenchmarkAcquireEach := func(b *testing.B) {
		l, err := memlock.New()
		if err != nil {
			b.Fatal(err)
		}
		locktest.BenchAcquireEach(b, l, 1000, 4)
	}
	_ = BenchmarkAcquireEach
}
