package etcdlock_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// lock.ReleaseEach on etcd: the generic path (each handle's own Release,
// 16 at once), waking subscribed waiters as Release does.
func TestReleaseEachConformance(t *testing.T) {
	srv := testenv.Etcd(t)
	locktest.RunReleaseEach(t, func(t testing.TB) lock.Lock { return newLock(t, srv.Endpoints()) }, suiteOptions()...)
}
