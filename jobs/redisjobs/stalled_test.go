package redisjobs_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
)

// A server that stops answering must not hold a registry call past its
// context, any of them (DeadJob, a plain HMGET, did: it waited go-redis's
// 5 s), with the default client (no ContextTimeoutEnabled: go-redis
// then waits its 5 s timeouts): the Runner's heartbeat and scan rely on it.
func TestStalledServerAnswersWithinTheDeadline(t *testing.T) {
	p := faultproxy.Start(t, testenv.Redis(t).Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	r, err := redisjobs.New(c, "stalled-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		t.Fatal(err)
	}
	tracked, err := r.Track(t.Context(), jobs.Job{ID: "j", Owner: "w"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ref := tracked.Ref()
	p.SetMode(faultproxy.Blackhole)
	defer p.SetMode(faultproxy.Pass)
	faultproxy.ExpectWithinDeadline(t, 200*time.Millisecond, 300*time.Millisecond,
		faultproxy.Op{Name: "Heartbeat", Call: func(ctx context.Context) error { _, err := r.Heartbeat(ctx, []jobs.Ref{ref}, time.Minute); return err }},
		faultproxy.Op{Name: "Track", Call: func(ctx context.Context) error {
			_, err := r.Track(ctx, jobs.Job{ID: "k", Owner: "w"}, time.Minute)
			return err
		}},
		faultproxy.Op{Name: "Expired", Call: func(ctx context.Context) error { _, err := r.Expired(ctx, 10); return err }},
		faultproxy.Op{Name: "Done", Call: func(ctx context.Context) error { return r.Done(ctx, ref) }},
		faultproxy.Op{Name: "Reclaim", Call: func(ctx context.Context) error { _, err := r.Reclaim(ctx, ref, "w", time.Minute); return err }},
		faultproxy.Op{Name: "Remove", Call: func(ctx context.Context) error { return r.Remove(ctx, ref) }},
		faultproxy.Op{Name: "Bury", Call: func(ctx context.Context) error { return r.Bury(ctx, ref, "x") }},
		faultproxy.Op{Name: "DeadJob", Call: func(ctx context.Context) error { _, err := r.DeadJob(ctx, "j"); return err }},
		faultproxy.Op{Name: "Purge", Call: func(ctx context.Context) error { return r.Purge(ctx, "j") }},
		faultproxy.Op{Name: "InFlight", Call: func(ctx context.Context) error { _, err := r.InFlight(ctx, 10); return err }},
		faultproxy.Op{Name: "Dead", Call: func(ctx context.Context) error { _, err := r.Dead(ctx, 10); return err }},
		faultproxy.Op{Name: "Counts", Call: func(ctx context.Context) error { _, err := r.Counts(ctx); return err }},
	)
}
