package memlock_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// lock.TryAcquireAnyEach through memlock's one pass, and through the
// generic path (a Lock that hides it).
func TestMemlockAcquireEach(t *testing.T) {
	shared := testkit.Must(memlock.New())
	t.Run("Native", func(t *testing.T) {
		locktest.RunAcquireEach(t, func(testing.TB) lock.Lock { return testkit.Must(shared.Share()) })
	})
	t.Run("Generic", func(t *testing.T) {
		locktest.RunAcquireEach(t, func(testing.TB) lock.Lock { return multiOnly{testkit.Must(shared.Share())} })
	})
}

// multiOnly is memlock without its TryAcquireAnyEach.
type multiOnly struct{ *memlock.Lock }

func (multiOnly) TryAcquireAnyEach() {}

// 1,000 TryAcquireAny in one TryAcquireAnyEach, against 16 at once and
// one after the other.
func BenchmarkMemlockAcquireEach(b *testing.B) {
	locktest.BenchAcquireEach(b, testkit.Must(memlock.New()), 1000, 4)
}
