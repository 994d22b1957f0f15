package redislock_test

import (
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

// anyRequests are n requests of k keys each; request i's keys share the
// hash tag tag(i).
func anyRequests(prefix string, n, k int, tag func(i int) string) []lock.AnyRequest {
	reqs := make([]lock.AnyRequest, n)
	for i := range reqs {
		reqs[i] = lock.AnyRequest{Keys: make([]string, k), TTL: time.Minute}
		for j := range k {
			reqs[i].Keys[j] = fmt.Sprintf("%s/{%s}/%d/%d", prefix, tag(i), i, j)
		}
	}
	return reqs
}

// lock.TryAcquireAnyEach on a single server and on a three-master
// Cluster: the checks of locktest.RunAcquireEach with the chunk as it is,
// with chunks of 7 keys (a request of 3 keys never splits: 2 a chunk) and
// of 3 requests, so that the requests of one call cross many chunk
// boundaries.
func TestAcquireEachConformance(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		// Instances of their own (owners) on one client.
		newL := func(t testing.TB) lock.Lock { return newLock(t, c) }
		t.Run("Chunk", func(t *testing.T) { locktest.RunAcquireEach(t, newL) })
		t.Run("ChunksOf7Keys", func(t *testing.T) {
			defer redislock.SetAnyEachChunk(7, 32)()
			locktest.RunAcquireEach(t, newL)
		})
		t.Run("ChunksOf3Requests", func(t *testing.T) {
			defer redislock.SetAnyEachChunk(128, 3)()
			locktest.RunAcquireEach(t, newL)
		})
	})
}

// TryAcquireAnyEach sends one pipeline: N requests over one slot group
// are one round trip (a script per 128 keys or 32 requests), and so are requests over
// many slots on a Cluster (one pipeline, which go-redis splits per
// master, a script per slot).
func TestAcquireEachRoundTrips(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		_, cluster := c.(*redis.ClusterClient)
		rec := &pipelines{}
		c.AddHook(rec)
		l := newLock(t, c)
		ctx := t.Context()
		prefix := runID(t)
		one := func(int) string { return "sem" }
		each := func(i int) string { return fmt.Sprint("s", i) }
		// Loads the script on every master the checks reach.
		l.TryAcquireAnyEach(ctx, anyRequests(prefix+"/warm", 1000, 1, each))
		rec.take()
		check := func(what string, reqs []lock.AnyRequest, scripts int) {
			t.Helper()
			for i, r := range l.TryAcquireAnyEach(ctx, reqs) {
				if r.Err != nil {
					t.Fatalf("%s: request %d: %v", what, i, r.Err)
				}
			}
			got := rec.take()
			if len(got) != 1 || strings.Trim(strings.ReplaceAll(got[0], "EVALSHA", ""), " ") != "" {
				t.Fatalf("%s sent %d pipelines (%.80q…), want one of EVALSHA only", what, len(got), got)
			}
			if n := strings.Count(got[0], "EVALSHA"); n != scripts {
				t.Errorf("%s sent %d scripts, want %d", what, n, scripts)
			}
		}
		// 300 requests of 4 keys, one tag: 1,200 keys, 10 scripts of 128.
		check("one slot", anyRequests(prefix+"/one", 300, 4, one), 10)
		// 1,000 requests of 16 keys, a tag each: 8 requests a script, or
		// on a Cluster a script per slot.
		scripts := 125
		if cluster {
			slots := map[uint16]bool{}
			for i := range 1000 {
				slots[redislock.KeySlot(each(i))] = true
			}
			scripts = len(slots)
		}
		check("a slot each", anyRequests(prefix+"/each", 1000, 16, each), scripts)
		if !cluster { // 1,000 requests of 1 key: 32 a script
			check("one key each", anyRequests(prefix+"/single", 1000, 1, one), 32)
		}
	})
}

// On a Cluster, a request whose keys are of several slots fails alone
// (ErrInvalidKey, as TryAcquireAny's), and the others are granted.
func TestAcquireEachCrossSlot(t *testing.T) {
	c := newClusterClient(t, testenv.NewRedis(t, testenv.Members(3)).Endpoints())
	l := newLock(t, c)
	prefix := runID(t)
	reqs := anyRequests(prefix, 3, 2, func(i int) string { return fmt.Sprint("t", i) })
	reqs[1].Keys = []string{prefix + "/{a}/x", prefix + "/{b}/x"}
	res := l.TryAcquireAnyEach(t.Context(), reqs)
	if res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("requests beside a cross-slot one: %v, %v", res[0].Err, res[2].Err)
	}
	if !errors.Is(res[1].Err, lock.ErrInvalidKey) || errors.Is(res[1].Err, lock.ErrUnavailable) {
		t.Fatalf("a cross-slot request: %v, want ErrInvalidKey", res[1].Err)
	}
}

// A request of more keys than one script takes (512) is made by
// TryAcquireAny, beside the others.
func TestAcquireEachLargeRequest(t *testing.T) {
	l := newLock(t, newClient(t, testenv.Redis(t).Addr()))
	other := newLock(t, newClient(t, testenv.Redis(t).Addr()))
	reqs := anyRequests(runID(t), 3, 1000, func(int) string { return "big" })
	reqs[0].Keys, reqs[2].Keys = reqs[0].Keys[:2], reqs[2].Keys[:3]
	for _, k := range reqs[1].Keys[:999] {
		if _, err := other.TryAcquire(t.Context(), k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	res := l.TryAcquireAnyEach(t.Context(), reqs)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
	}
	if k := res[1].Handle.Key(); k != reqs[1].Keys[999] {
		t.Fatalf("the large request got %q, its one free key is %q", k, reqs[1].Keys[999])
	}
}

// Under WithReplicaAcks: on a replicated Cluster every request over keys
// of every master is granted (one WAIT per master); with no replica
// acknowledging, every request fails with ErrUnavailable and its grant is
// released again, as TryAcquire's is.
func TestAcquireEachUnderReplicaAcks(t *testing.T) {
	t.Run("Cluster", func(t *testing.T) {
		srv := testenv.NewRedis(t, testenv.Members(3), testenv.Replicas(1))
		l := newLock(t, newClusterClient(t, srv.Endpoints()), redislock.WithReplicaAcks(1, time.Second))
		reqs := anyRequests(runID(t), 500, 3, func(i int) string { return fmt.Sprint("t", i%50) })
		for i, r := range l.TryAcquireAnyEach(t.Context(), reqs) {
			if r.Err != nil {
				t.Fatalf("request %d: %v", i, r.Err)
			}
		}
	})
	t.Run("NoReplica", func(t *testing.T) {
		srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
		l := newLock(t, srv.FailoverClient(t), redislock.WithReplicaAcks(1, 300*time.Millisecond))
		reqs := anyRequests(runID(t), 300, 2, func(int) string { return "sem" })
		cutReplicas(t, srv, 3*time.Second)
		for i, r := range l.TryAcquireAnyEach(t.Context(), reqs) {
			if !errors.Is(r.Err, lock.ErrUnavailable) || r.Handle != nil {
				t.Fatalf("request %d with no replica: %v, want ErrUnavailable", i, r.Err)
			}
		}
		for _, i := range []int{0, 150, 299} {
			for _, k := range reqs[i].Keys {
				if g, ok, err := l.Inspect(t.Context(), k); ok || err != nil {
					t.Errorf("an unacknowledged grant of %q is still held: %+v %v", k, g, err)
				}
			}
		}
	})
}

// 1,000 TryAcquireAny in one TryAcquireAnyEach (one pipeline of 32
// scripts), against 16 at once and one after the other.
func BenchmarkRedisAcquireEach(b *testing.B) {
	locktest.BenchAcquireEach(b, newLock(b, newClient(b, testenv.Redis(b).Addr())), 1000, 4)
}

// A TryAcquireAnyEach whose pipeline is sent twice (its replies lost, the
// pipeline retried by the client) reports the grants the first attempt
// made, not a second key of the same request nor a refusal.
func TestAcquireEachRetriedByTheClient(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	hook := &replayPipeline{}
	c.AddHook(hook)
	l := newLock(t, c)
	ctx := t.Context()
	reqs := anyRequests(runID(t), 200, 3, func(i int) string { return fmt.Sprint("r", i%7) })
	l.TryAcquireAnyEach(ctx, reqs[:1]) // loads the script: the replay is of EVALSHA
	hook.armed.Store(true)
	for i, r := range l.TryAcquireAnyEach(ctx, reqs[1:]) {
		if r.Err != nil {
			t.Fatalf("retried request %d: %v", i+1, r.Err)
		}
		for _, k := range reqs[i+1].Keys {
			g, ok, err := l.Inspect(ctx, k)
			if err != nil || ok != (k == r.Handle.Key()) || (ok && g.Token != r.Handle.Token()) {
				t.Fatalf("request %d granted %q: Inspect(%q) = %+v %v %v", i+1, r.Handle.Key(), k, g, ok, err)
			}
		}
	}
}
