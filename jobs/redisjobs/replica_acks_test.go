package redisjobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
	"github.com/leasehold-go/leasehold/lock"
)

func TestReplicaAcksOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redisjobs.Option{redisjobs.WithReplicaAcks(0, time.Second), redisjobs.WithReplicaAcks(1, 0), nil} {
		if _, err := redisjobs.New(c, "x", o); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("New: %v, want ErrInvalidArgument", err)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redisjobs.New(ring, "x", redisjobs.WithReplicaAcks(1, time.Second)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("New(ring, WithReplicaAcks): %v, want ErrInvalidArgument", err)
	}
}

// The registry's protocol holds under WithReplicaAcks, on a primary with
// replicas behind Sentinels; tracked jobs, their completions and the dead
// set survive a crash of the primary.
func TestReplicaAcks(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	c := srv.FailoverClient(t)
	opt := redisjobs.WithReplicaAcks(1, time.Second)
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, err := redisjobs.New(c, "acks:"+t.Name(), opt)
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
	t.Run("ChunkedHeartbeat", func(t *testing.T) { // several scripts, one WAIT after them
		r, err := redisjobs.New(c, "acks:chunks", opt)
		if err != nil {
			t.Fatal(err)
		}
		registrytest.ChunkedHeartbeat(t, r, redisjobs.HeartbeatChunk(), 2)
	})
	t.Run("Failover", func(t *testing.T) {
		ctx := t.Context()
		r, err := redisjobs.New(c, "acks:failover", opt)
		if err != nil {
			t.Fatal(err)
		}
		var tracked []jobs.Job
		for i := range 20 {
			j, err := r.Track(ctx, jobs.Job{ID: fmt.Sprintf("j%d", i), Payload: []byte("p"), Owner: "w"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			tracked = append(tracked, j)
		}
		for _, j := range tracked[:5] {
			if err := r.Done(ctx, j.Ref()); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Bury(ctx, tracked[5].Ref(), "poison"); err != nil {
			t.Fatal(err)
		}
		srv.Failover(t, testenv.Crash)
		var counts jobs.Counts
		for deadline := time.Now().Add(30 * time.Second); ; {
			if counts, err = r.Counts(ctx); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || counts.Tracked != 14 || counts.Dead != 1 {
			t.Fatalf("after the failover: %+v, %v; want 14 tracked, 1 dead", counts, err)
		}
		for _, j := range tracked[:5] { // completed before: a retried Done still says so
			if err := r.Done(ctx, j.Ref()); err != nil {
				t.Fatalf("Done of %s retried after the failover: %v", j.ID, err)
			}
		}
		if lost, err := r.Heartbeat(ctx, []jobs.Ref{tracked[6].Ref()}, time.Minute); err != nil || len(lost) != 0 {
			t.Fatalf("heartbeat of %s after the failover: lost %v, %v", tracked[6].ID, lost, err)
		}
	})
}

// With no replica answering, a write under WithReplicaAcks fails with
// lock.ErrUnavailable instead of reporting a job tracked that a failover
// would lose.
func TestReplicaAcksUnanswered(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	r, err := redisjobs.New(srv.FailoverClient(t), "acks:unanswered", redisjobs.WithReplicaAcks(1, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	primary := srv.Primary(t)
	for _, addr := range srv.Endpoints() {
		if addr != primary {
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			go func() { _ = c.Do(context.Background(), "DEBUG", "SLEEP", 2).Err() }()
		}
	}
	deadline := time.Now().Add(time.Second)
	for {
		_, err = r.Track(t.Context(), jobs.Job{ID: "j", Owner: "w"}, time.Minute)
		if err != nil || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Track with its replica asleep: %v, want ErrUnavailable", err)
	}
	refs := make([]jobs.Ref, 2*redisjobs.HeartbeatChunk()+1) // three scripts and their WAIT
	for i := range refs {
		refs[i] = jobs.Ref{ID: fmt.Sprint("j", i), Epoch: 1}
	}
	if _, err := r.Heartbeat(t.Context(), refs, time.Minute); !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Heartbeat with its replica asleep: %v, want ErrUnavailable", err)
	}
}

// A batch under WithReplicaAcks ends with its context also on a client
// that does not bound calls by their context (go-redis's default), while
// its WAIT waits for replicas that never answer: each answer is the
// context's error, none a success. The pipeline's goroutine copied the
// calls whole, their replies included, which the caller wrote once the
// context ended: a data race (go test -race).
func TestBatchUnderAcksEndsWithItsContext(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	c := newClient(t, srv.Primary(t)) // ContextTimeoutEnabled false
	plain, ns := newRegistry(t, c, "acks-batch")
	var refs []jobs.Ref
	for i := range 3 {
		j, err := plain.Track(t.Context(), jobs.Job{ID: fmt.Sprint("j", i), Owner: "w"}, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, j.Ref())
	}
	const wait = 5 * time.Second // two replicas asked for, one there: WAIT waits it all
	acked, err := redisjobs.New(c, ns, redisjobs.WithReplicaAcks(2, wait))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	got := acked.ReclaimEach(ctx, refs, "recoverer", time.Minute)
	if took := time.Since(start); took > wait-time.Second {
		t.Fatalf("ReclaimEach under a context of 100 ms returned after %v, with its WAIT", took)
	}
	for i, g := range got {
		if !errors.Is(g.Err, context.DeadlineExceeded) && !errors.Is(g.Err, lock.ErrUnavailable) {
			t.Errorf("answer %d: %+v, want the context's error", i, g)
		}
	}
	for i, err := range acked.RemoveEach(ctx, refs) { // refused before anything is sent
		if err == nil {
			t.Errorf("RemoveEach %d under an ended context succeeded", i)
		}
	}
}

// A batch under WithReplicaAcks on a server that lost its scripts (SCRIPT
// FLUSH, a restart): the calls go again by EVAL in a second pipeline with
// a WAIT of its own, whose answer is theirs: each reclaim and remove is
// made and acknowledged.
func TestBatchUnderAcksAfterScriptFlush(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	c := srv.FailoverClient(t)
	r, err := redisjobs.New(c, fmt.Sprintf("acks-flush-%d", time.Now().UnixNano()), redisjobs.WithReplicaAcks(1, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var refs []jobs.Ref
	for i := range 3 {
		j, err := r.Track(t.Context(), jobs.Job{ID: fmt.Sprint("j", i), Owner: "w"}, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, j.Ref())
	}
	for deadline := time.Now().Add(10 * time.Second); ; { // the leases end by the server's clock
		js, err := r.Expired(t.Context(), 0)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Expired: %d of %d, %v", len(js), len(refs), err)
		}
		if len(js) == len(refs) {
			break
		}
		<-time.After(5 * time.Millisecond)
	}
	if err := c.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	var reclaimed []jobs.Ref
	for i, g := range r.ReclaimEach(t.Context(), refs, "recoverer", time.Minute) {
		if g.Err != nil || g.Job.Attempt != 1 {
			t.Fatalf("ReclaimEach %d after SCRIPT FLUSH: %+v", i, g)
		}
		reclaimed = append(reclaimed, g.Job.Ref())
	}
	if err := c.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	for i, err := range r.RemoveEach(t.Context(), reclaimed) {
		if err != nil {
			t.Fatalf("RemoveEach %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	if c, err := r.Counts(t.Context()); err != nil || c.Tracked != 0 {
		t.Fatalf("after the batches: %+v, %v", c, err)
	}
}
