package memlock_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func BenchmarkMemlockTryAcquireRelease(b *testing.B) {
	locktest.BenchTryAcquireRelease(b, memlock.New())
}

func BenchmarkMemlockHandoff(b *testing.B) {
	l := memlock.New()
	locktest.BenchHandoff(b, l, l.Share())
}
