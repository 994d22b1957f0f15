package pglock_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// lock.TryAcquireAnyEach on PostgreSQL: the generic path, one
// TryAcquireAny per request, 16 at once. Each grant holds one of the
// pool's 24 connections, so a call makes 12 requests.
func TestAcquireEachConformance(t *testing.T) {
	srv := testenv.Postgres(t)
	locktest.RunAcquireEach(t, func(t testing.TB) lock.Lock { return newLock(t, srv.DSN()) }, locktest.WithEachRequests(12))
}
