package redislock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// Under WithReplicaAcks on a replicated Cluster, Renew and ClaimEach over
// keys of every master wait for each master's replica (one WAIT per
// master, after its scripts) and succeed.
func TestBatchUnderReplicaAcksOnACluster(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Members(3), testenv.Replicas(1))
	l := newLock(t, newClusterClient(t, srv.Endpoints()), redislock.WithReplicaAcks(1, time.Second))
	ctx := t.Context()
	keys := batchKeys(runID(t), 1500)
	b := newBatch(t, l, time.Minute)
	hs := acquireAll(t, b, keys)
	for i, err := range b.Renew(ctx, hs) {
		if err != nil {
			t.Fatalf("Renew of %q: %v", keys[i], err)
		}
	}
	reqs := make([]lock.ClaimRequest, len(keys))
	for i, k := range keys {
		reqs[i] = lock.ClaimRequest{Key: k + "/claim", TTL: time.Minute}
	}
	for i, r := range l.ClaimEach(ctx, reqs) {
		if r.Err != nil || r.Token == 0 {
			t.Fatalf("claim of %q: %d %v", reqs[i].Key, r.Token, r.Err)
		}
	}
}

// When no replica acknowledges, every renewal is unknown (ErrUnavailable)
// with its ValidUntil where it was, and every claim fails with
// ErrUnavailable and is released again, as TryAcquire's grant is.
func TestBatchWithoutReplicaAcks(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	l := newLock(t, srv.FailoverClient(t), redislock.WithReplicaAcks(1, 300*time.Millisecond))
	ctx := t.Context()
	keys := batchKeys(runID(t), 1200)
	b := newBatch(t, l, time.Minute)
	hs := acquireAll(t, b, keys)
	before := make([]time.Time, len(hs))
	for i, h := range hs {
		before[i] = h.ValidUntil()
	}
	cutReplicas(t, srv, 3*time.Second)
	for i, err := range b.Renew(ctx, hs) {
		if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrLost) {
			t.Fatalf("Renew of %q with no replica: %v, want ErrUnavailable", keys[i], err)
		}
		if hs[i].ValidUntil() != before[i] {
			t.Fatalf("%q: ValidUntil moved on an unacknowledged renewal", keys[i])
		}
	}
	reqs := make([]lock.ClaimRequest, len(keys))
	for i, k := range keys {
		reqs[i] = lock.ClaimRequest{Key: fmt.Sprint(k, "/claim"), TTL: time.Minute}
	}
	for i, r := range l.ClaimEach(ctx, reqs) {
		if !errors.Is(r.Err, lock.ErrUnavailable) {
			t.Fatalf("claim of %q with no replica: %d %v, want ErrUnavailable", reqs[i].Key, r.Token, r.Err)
		}
	}
	for _, i := range []int{0, 999, 1199} {
		if g, ok, err := l.Inspect(ctx, reqs[i].Key); ok || err != nil {
			t.Errorf("an unacknowledged claim of %q is still held: %+v %v", reqs[i].Key, g, err)
		}
	}
}
