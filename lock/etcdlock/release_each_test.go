package etcdlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// lock.ReleaseEach on etcd's EachReleaser with Txns of 7 deletes, so that
// the checked handles straddle Txns, and on a Keeper's batch grants.
func TestReleaseEachConformance(t *testing.T) {
	defer etcdlock.SetReleasesPerTxn(7)()
	srv := testenv.Etcd(t)
	locktest.RunReleaseEach(t, func(t testing.TB) lock.Lock { return newLock(t, srv.Endpoints()) },
		append(suiteOptions(), locktest.WithReleaseChunk(7))...)
}

// ReleaseEach of 300 grants, plain and a Batch's, in Txns of 128: each is
// released, one deleted behind its back is lost alone, the keys are free,
// and a second ReleaseEach is ErrLost for each.
func TestReleaseEachMany(t *testing.T) {
	srv := testenv.Etcd(t)
	l, other := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := t.Context()
	b, err := l.NewBatch(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	hs := make([]lock.Handle, 300)
	for i := range hs {
		key := fmt.Sprintf("%s/%d", t.Name(), i)
		if i%2 == 0 {
			hs[i], err = l.TryAcquire(ctx, key, 5*time.Second)
		} else {
			hs[i], err = b.TryAcquire(ctx, key)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.ForceRelease(ctx, hs[130].Key()); err != nil {
		t.Fatal(err)
	}
	for i, err := range l.ReleaseEach(ctx, hs) {
		if (i == 130) != errors.Is(err, lock.ErrLost) || (i != 130 && err != nil) {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	for _, i := range []int{0, 1, 127, 128, 130, 299} {
		h, err := other.TryAcquire(ctx, hs[i].Key(), 5*time.Second)
		if err != nil {
			t.Fatalf("key %d not free after ReleaseEach: %v", i, err)
		}
		_ = h.Release(ctx)
	}
	for i, err := range l.ReleaseEach(ctx, hs) {
		if !errors.Is(err, lock.ErrLost) {
			t.Fatalf("second release %d: %v", i, err)
		}
	}
}

// BenchmarkEtcdKeeperRelease: a Keeper's Close of 10,000 leases, and
// 10,000 concurrent Lease.Release, on etcd. Run with -benchtime 1x.
func BenchmarkEtcdKeeperRelease(b *testing.B) {
	srv := testenv.Etcd(b)
	locktest.BenchKeeperRelease(b, newLock(b, srv.Endpoints()), 10_000, nil)
}
