package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// lock.ReleaseEach's conformance on Redis and on a three-master Cluster
// (the suite's keys spread over its slots), with chunks of 7 grants so
// that the checked handles straddle chunk boundaries.
func TestReleaseEachConformance(t *testing.T) {
	defer redislock.SetReleaseChunk(7)()
	t.Run("single", func(t *testing.T) {
		addr := testenv.Redis(t).Addr()
		locktest.RunReleaseEach(t, func(t testing.TB) lock.Lock { return newLock(t, newClient(t, addr)) }, locktest.WithReleaseChunk(7))
	})
	t.Run("cluster", func(t *testing.T) {
		srv := testenv.NewRedis(t, testenv.Members(3))
		locktest.RunReleaseEach(t, func(t testing.TB) lock.Lock { return newLock(t, newClusterClient(t, srv.Endpoints())) }, locktest.WithReleaseChunk(7))
	})
}

// ReleaseEach over 2,500 grants of many slots (three tags, and a few
// without), more than a chunk per slot: each is released, the keys are
// free, the grants another owner took over are lost alone, and a second
// ReleaseEach is ErrLost for each without a call.
func TestReleaseEachMany(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		rec := &pipelines{}
		c.AddHook(rec)
		l, other := newLock(t, c), newLock(t, c)
		ctx := t.Context()
		keys := batchKeys(runID(t), 2500)
		hs := make([]lock.Handle, len(keys))
		for i, k := range keys {
			h, err := l.TryAcquire(ctx, k, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			hs[i] = h
		}
		for _, i := range []int{199, 200, 1999} {
			if _, err := l.ForceRelease(ctx, keys[i]); err != nil {
				t.Fatal(err)
			}
			if _, err := other.TryAcquire(ctx, keys[i], time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		rec.take()
		errs := l.ReleaseEach(ctx, hs)
		for i, err := range errs {
			lost := i == 199 || i == 200 || i == 1999
			if lost != errors.Is(err, lock.ErrLost) || (!lost && err != nil) {
				t.Fatalf("release of %q: %v", keys[i], err)
			}
		}
		// One pipeline, and a second of EVALs for the masters that did
		// not have the script yet.
		if got := rec.take(); len(got) == 0 || len(got) > 2 || strings.Contains(got[0], "EVAL ") || len(got) == 2 && strings.Contains(got[1], "EVALSHA") {
			t.Errorf("ReleaseEach of 2,500 sent %q, want one pipeline (and one of EVALs)", got)
		}
		for _, i := range []int{0, 99, 1234, 2499} {
			if _, ok, err := l.Inspect(ctx, keys[i]); ok || err != nil {
				t.Errorf("%q held after ReleaseEach: %v", keys[i], err)
			}
		}
		if g, ok, _ := l.Inspect(ctx, keys[200]); !ok || g.Owner != other.Owner() {
			t.Errorf("the other owner's grant of %q: %+v %v", keys[200], g, ok)
		}
		for i, err := range l.ReleaseEach(ctx, hs) {
			if !errors.Is(err, lock.ErrLost) {
				t.Fatalf("second release of %q: %v", keys[i], err)
			}
		}
		if got := rec.take(); len(got) != 0 {
			t.Errorf("a second ReleaseEach sent %q, want nothing", got)
		}
	})
}

// ReleaseEach sends one script per chunk of 32 grants (per slot on a
// Cluster) in one pipeline: round trips counted by the client's hook.
func TestReleaseEachRoundTrips(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		rec := &pipelines{}
		c.AddHook(rec)
		l := newLock(t, c)
		ctx := t.Context()
		prefix := runID(t)
		held := func(tag string, n int) []lock.Handle {
			hs := make([]lock.Handle, n)
			for i := range hs {
				h, err := l.TryAcquire(ctx, fmt.Sprintf("%s/{%s}/%d", prefix, tag, i), time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				hs[i] = h
			}
			return hs
		}
		warm := held("warm", 1)
		rec.take()
		l.ReleaseEach(ctx, warm) // loads the script where it is not
		hs := held("a", 501)
		rec.take()
		for _, err := range l.ReleaseEach(ctx, hs) {
			if err != nil {
				t.Fatal(err)
			}
		}
		_, chunk := redislock.Chunks()
		if got, n := rec.take(), (501+chunk-1)/chunk; len(got) != 1 || got[0] != strings.TrimSpace(strings.Repeat("EVALSHA ", n)) {
			t.Errorf("501 releases sent %q, want one pipeline of %d scripts", got, n)
		}
		// One by one, as before ReleaseEach: a round trip each.
		hs = held("b", 50)
		rec.take()
		for _, h := range hs {
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got := rec.take(); len(got) != 0 { // single commands: no pipeline
			t.Errorf("Releases sent pipelines %q", got)
		}
	})
}

// Under WithReplicaAcks on a replicated Cluster, ReleaseEach (not
// acknowledged, as Release is not) releases keys of every master, and a
// queued waiter it hands a key to confirms the handoff itself.
func TestReleaseEachUnderReplicaAcks(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Members(3), testenv.Replicas(1))
	l := newLock(t, newClusterClient(t, srv.Endpoints()), redislock.WithReplicaAcks(1, time.Second))
	w := newLock(t, newClusterClient(t, srv.Endpoints()), redislock.WithReplicaAcks(1, time.Second))
	ctx := t.Context()
	keys := batchKeys(runID(t), 600)
	hs := make([]lock.Handle, len(keys))
	for i, k := range keys {
		h, err := l.TryAcquire(ctx, k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	got := make(chan error, 1)
	go func() {
		h, err := w.AcquireQueued(ctx, keys[99], time.Minute)
		if err == nil {
			_ = h.Release(context.Background())
		}
		got <- err
	}()
	locktest.WaitQueued(t, w, keys[99], 1, 10*time.Second)
	for i, err := range l.ReleaseEach(ctx, hs) {
		if err != nil {
			t.Fatalf("release of %q: %v", keys[i], err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the queued waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued waiter did not get the key")
	}
}
