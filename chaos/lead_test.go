package chaos_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// deadSecondGrant is a Lock whose second grant is handed out past its
// ValidUntil: leader.Run's lock.Hold loses it before fn starts, skips fn,
// and calls OnDemoted for that term.
type deadSecondGrant struct {
	lock.Lock
	grants atomic.Int32
}

func (d *deadSecondGrant) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := d.Lock.TryAcquire(ctx, key, ttl)
	if err == nil && d.grants.Add(1) == 2 {
		return pastDeadline{h}, nil
	}
	return h, err
}

type pastDeadline struct{ lock.Handle }

func (p pastDeadline) ValidUntil() time.Time { return time.Now().Add(-time.Second) }

// The leader workload records each term once, when leader.Run has
// released it, and a term whose fn never started not at all. It recorded
// the previous term again for such a term (OnDemoted follows it):
// TestPartitionEtcdLeader/leader, seed 975810, failed on "worker 0 token
// 32 overlaps worker 0 token 32", one term recorded twice.
func TestLeaderWorkloadRecordsEachTermOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &history{}
		fence := new(lock.Fence)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		l := &deadSecondGrant{Lock: testkit.Must(memlock.New())}
		lead(ctx, 0, l, "records", 3*time.Second, 2*time.Second, func(string) *lock.Fence { return fence }, h, nil, 1)
		if l.grants.Load() < 3 {
			t.Fatalf("%d grants in a minute, want at least 3", l.grants.Load())
		}
		seen := map[uint64]bool{}
		for _, g := range h.Grants {
			if seen[g.Token] {
				t.Errorf("term %d recorded twice: %+v", g.Token, h.Grants)
			}
			seen[g.Token] = true
		}
		if bad := h.check(); len(bad) > 0 {
			t.Errorf("the history of a healthy election fails its check: %v", bad)
		}
	})
}
