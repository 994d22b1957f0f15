package memlock_test

import (
	"github.com/leasehold-go/leasehold/internal/testkit"
	"testing"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func TestMemlockConformance(t *testing.T) {
	shared := testkit.Must(memlock.New())
	// Every instance shares one in-process table, as processes share a server.
	locktest.Run(t, func(testing.TB) lock.Lock { return testkit.Must(shared.Share()) })
}

// The conformance suite on grants made through batches, and what only
// batches do.
func TestMemlockBatchConformance(t *testing.T) {
	shared := testkit.Must(memlock.New())
	newLock := func(testing.TB) lock.Lock { return testkit.Must(shared.Share()) }
	t.Run("Conformance", func(t *testing.T) { locktest.Run(t, locktest.Batched(newLock)) })
	t.Run("Batch", func(t *testing.T) { locktest.RunBatch(t, newLock) })
}

// lock.ReleaseEach on memlock's EachReleaser (one pass, no chunks), and
// through the generic path (each handle's Release) on a Lock that hides it.
func TestMemlockReleaseEach(t *testing.T) {
	shared := testkit.Must(memlock.New())
	t.Run("Native", func(t *testing.T) {
		locktest.RunReleaseEach(t, func(testing.TB) lock.Lock { return testkit.Must(shared.Share()) })
	})
	t.Run("Generic", func(t *testing.T) {
		locktest.RunReleaseEach(t, func(testing.TB) lock.Lock { return generic{testkit.Must(shared.Share())} })
	})
}

// generic is a memlock Lock that is not a lock.EachReleaser.
type generic struct{ *memlock.Lock }

func (g generic) ReleaseEach() {} // hides (*memlock.Lock).ReleaseEach
