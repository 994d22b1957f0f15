package redisjobs_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
)

// A Done whose reply is lost after it took effect is retried by go-redis
// (MaxRetries, 3 by default) and reports nil, as the first attempt did: the
// job is not tracked any more. It said ErrStale (chaos TestNemesisJobs/redis
// seed 70185). The proxy holds the reply back; once the job's hash is gone
// on the server, the test resets the connection, and the client retries.
func TestDoneRetriedByTheClient(t *testing.T) {
	srv := testenv.Redis(t)
	p := faultproxy.Start(t, srv.Addr())
	direct := newClient(t, srv.Addr())
	r, ns := newRegistry(t, newClient(t, p.Addr()), "retried-done")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Load the script, so that the lost attempt and the retry are one
	// EVALSHA each.
	warm, err := r.Track(ctx, jobs.Job{ID: "warm", Owner: "w"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Done(ctx, warm.Ref()); err != nil {
		t.Fatal(err)
	}

	j, err := r.Track(ctx, jobs.Job{ID: "job\x00\x1e", Owner: "w"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	jobKey := "{" + ns + "}:job:" + j.ID
	p.SetDelay(time.Second) // the request, then the reply, each held a second
	done := make(chan error, 1)
	go func() { done <- r.Done(ctx, j.Ref()) }()
	// The request reached the server and took effect: its reply is still
	// in the proxy. Lose it.
	for {
		n, err := direct.Exists(ctx, jobKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Done returned %v before the proxy forwarded its reply", err)
		case <-time.After(time.Millisecond):
		}
	}
	p.SetDelay(0)
	p.ResetAll()
	if err := <-done; err != nil {
		t.Fatalf("Done retried by the client after it took effect: %v, want nil", err)
	}
	if in, err := r.InFlight(ctx, 0); err != nil || len(in) != 0 {
		t.Fatalf("still tracked after Done: %+v, %v", in, err)
	}
	if c, err := r.Counts(ctx); err != nil || c != (jobs.Counts{}) {
		t.Fatalf("Counts after Done: %+v, %v", c, err)
	}
	// The completion marker expires with the done window.
	keys, err := direct.Keys(ctx, "{"+ns+"}:done:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("completion markers %q, %v", keys, err)
	}
	for _, k := range keys {
		if ttl, err := direct.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > jobs.DoneWindow {
			t.Fatalf("marker %q expires in %v (%v), want within jobs.DoneWindow", k, ttl, err)
		}
	}
}

// Records written by something else (an operator, an older version, a
// bug) never fail a listing or a reclaim, and a history record that does
// not parse is skipped rather than shown with made-up fields (At 1970).
func TestCorruptRecordsAreTolerated(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	r, ns := newRegistry(t, c, "corrupt")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w"}, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	key := "{" + ns + "}:job:j"
	good := "1700000000000\x1fold\x1fnew\x1f1"
	history := strings.Join([]string{"garbage", good, "x\x1fa\x1fb\x1fy", "1\x1f2"}, "\x1e")
	if err := c.HSet(ctx, key, "attempt", "not a number", "history", history).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HDel(ctx, key, "owner", "payload").Err(); err != nil {
		t.Fatal(err)
	}
	var expired []jobs.Job
	for len(expired) == 0 {
		if expired, err = r.Expired(ctx, 10); err != nil {
			t.Fatalf("Expired over a corrupt record: %v", err)
		}
		<-time.After(5 * time.Millisecond)
	}
	if h := expired[0].History; len(h) != 1 || h[0].From != "old" || h[0].At.UnixMilli() != 1700000000000 {
		t.Fatalf("history read back as %+v, want only the record that parses", h)
	}
	rc, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatalf("Reclaim of a corrupt record: %v", err)
	}
	if rc.Attempt != 1 || len(rc.History) != 2 || rc.History[1].By != "recoverer" {
		t.Fatalf("reclaimed as %+v", rc)
	}
	if err := r.Done(ctx, rc.Ref()); err != nil {
		t.Fatal(err)
	}
	if err := r.Done(ctx, jobs.Ref{ID: "j", Epoch: j.Epoch}); !errors.Is(err, jobs.ErrStale) {
		t.Fatalf("Done of the reclaimed epoch: %v, want ErrStale", err)
	}
}

func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newRegistry returns a registry in a fresh namespace of its own, and the
// namespace.
func newRegistry(t testing.TB, c *redis.Client, prefix string) (*redisjobs.Registry, string) {
	ns := prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	r, err := redisjobs.New(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	return r, ns
}
