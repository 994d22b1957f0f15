package memlock_test

import (
	"github.com/leasehold-go/leasehold/internal/testkit"
	"testing"

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
