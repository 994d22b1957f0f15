package etcdlock_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// lock.TryAcquireAnyEach on etcd: the generic path, one TryAcquireAny per
// request, 16 at once.
func TestAcquireEachConformance(t *testing.T) {
	srv := testenv.Etcd(t)
	locktest.RunAcquireEach(t, func(t testing.TB) lock.Lock { return newLock(t, srv.Endpoints()) }, suiteOptions()...)
}
