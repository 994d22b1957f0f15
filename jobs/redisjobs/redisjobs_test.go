package redisjobs_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestConformance(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	conformance(t, c)
}

// On a Redis Cluster (three masters) a registry lives in one slot: every
// script, and the pipelines of ReclaimEach and RemoveEach, go to the
// master of its hash tag. Several registries, in several slots, share the
// client.
func TestConformanceOnACluster(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.NewRedis(t, testenv.Members(3)).Endpoints()})
	t.Cleanup(func() { _ = c.Close() })
	conformance(t, c)
}

// conformance runs the suite on registries of namespaces of their own on c.
func conformance(t *testing.T, c redis.UniversalClient) {
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, err := redisjobs.New(c, "test:"+t.Name()+":"+time.Now().Format("150405.000000000"))
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}

// A retry record (Remove) is a key that expires after jobs.RetryWindow:
// Redis drops it, and a Track after that starts the job again from
// Attempt 0.
func TestRetryRecordsExpire(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	r, ns := newRegistry(t, c, "retry")
	ctx := t.Context()
	registrytest.Requeued(t, r, "j", 3)
	key := "{" + ns + "}:retry:j"
	if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= jobs.RetryWindow-time.Minute || ttl > jobs.RetryWindow {
		t.Fatalf("retry record %s expires in %v (%v), want jobs.RetryWindow", key, ttl, err)
	}
	// The window ends (a millisecond left).
	if err := c.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); c.Exists(ctx, key).Val() == 1; <-time.After(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the retry record did not expire")
		}
	}
	if j, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w"}, time.Minute); err != nil || j.Attempt != 0 || j.MaxRetries != 0 || len(j.History) != 0 {
		t.Fatalf("Track after the retry window: %+v, %v; want a new job", j, err)
	}
}

// Done and Bury drop a retry record of their job's ID.
func TestDoneAndBuryDropRetryRecords(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	r, ns := newRegistry(t, c, "drop")
	registrytest.DoneAndBuryDropRetryRecords(t, r, func(id string) {
		if err := c.HSet(t.Context(), "{"+ns+"}:retry:"+id, "attempt", 3, "history", "", "maxretries", 2).Err(); err != nil {
			t.Fatal(err)
		}
	})
}
