package pglock_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// lock.ReleaseEach on PostgreSQL: the generic path (each handle's own
// Release, 16 at once), waking queued and subscribed waiters as Release
// does. It has no chunks: WithReleaseChunk(8) makes the suite hold 19
// grants at once, within the test pool's 24 connections (a grant pins
// one).
func TestReleaseEachConformance(t *testing.T) {
	srv := testenv.Postgres(t)
	locktest.RunReleaseEach(t, func(t testing.TB) lock.Lock { return newLock(t, srv.DSN()) }, locktest.WithReleaseChunk(8))
}
