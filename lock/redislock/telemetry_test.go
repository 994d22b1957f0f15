package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/metrictest"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// TestMetrics: redislock records its attempts and releases, by outcome,
// under leasehold.backend=redislock, through the MeterProvider of its
// options; lock.Acquire records its wait through the same one.
func TestMetrics(t *testing.T) {
	mp, reader := metrictest.New()
	common := lock.Common{MeterProvider: mp}
	addr := testenv.Redis(t).Addr()
	a := newLock(t, newClient(t, addr), redislock.WithCommon(common))
	b := newLock(t, newClient(t, addr), redislock.WithCommon(common))
	ctx := t.Context()
	key := "metrics/" + lock.NewOwner()

	h, err := lock.Acquire(ctx, a, key, time.Minute, lock.WithCommon(common)) // attempt acquired, wait acquired
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctx, key, time.Minute); err == nil { // attempt busy
		t.Fatal("a second grant of a held key")
	}
	if err := h.Release(ctx); err != nil { // released
		t.Fatal(err)
	}
	hb, err := b.TryAcquire(ctx, key, time.Minute) // attempt acquired
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := a.ForceRelease(ctx, key); err != nil || !removed {
		t.Fatalf("ForceRelease: %v %v", removed, err)
	}
	if err := hb.Release(ctx); err == nil { // lost
		t.Fatal("Release after ForceRelease succeeded")
	}

	// A client that is closed fails every command: error outcomes.
	dead := redis.NewClient(&redis.Options{Addr: addr})
	d := newLock(t, dead, redislock.WithCommon(common))
	hd, err := d.TryAcquire(ctx, key+"/dead", time.Minute) // attempt acquired
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Close()
	if _, err := d.TryAcquire(ctx, key+"/dead2", time.Minute); err == nil { // attempt error
		t.Fatal("TryAcquire on a closed client succeeded")
	}
	if err := hd.Release(ctx); err == nil { // release error
		t.Fatal("Release on a closed client succeeded")
	}

	metrictest.Expect(t, metrictest.Points(t, reader), map[string]int64{
		"leasehold.lock.attempt.duration{leasehold.backend=redislock,leasehold.outcome=acquired}": 3,
		"leasehold.lock.attempt.duration{leasehold.backend=redislock,leasehold.outcome=busy}":     1,
		"leasehold.lock.attempt.duration{leasehold.backend=redislock,leasehold.outcome=error}":    1,
		"leasehold.lock.releases{leasehold.backend=redislock,leasehold.outcome=released}":         1,
		"leasehold.lock.releases{leasehold.backend=redislock,leasehold.outcome=lost}":             1,
		"leasehold.lock.releases{leasehold.backend=redislock,leasehold.outcome=error}":            1,
		"leasehold.lock.wait.duration{leasehold.outcome=acquired}":                                1,
	})
}
