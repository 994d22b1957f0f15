// Package registrytest is the conformance suite of jobs.Registry: memjobs,
// redisjobs and pgjobs run it against a real server, and so should any
// other implementation.
//
//	registrytest.Run(t, func(t testing.TB) jobs.Registry { return newRegistry(t) })
//
// The factory returns a registry over fresh, empty state (its own namespace
// or table prefix) for each call.
package registrytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock"
)

// Run runs the suite as parallel subtests of t.
func Run(t *testing.T, newRegistry func(t testing.TB) jobs.Registry) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, jobs.Registry)
	}{
		{"TrackAndDone", trackAndDone},
		{"RetrackMakesOldStale", retrack},
		{"BatchedHeartbeat", heartbeat},
		{"ExpiredInDeadlineOrder", expiredOrder},
		{"Reclaim", reclaim},
		{"DeadSet", deadSet},
		{"BadInput", badInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newRegistry(t))
		})
	}
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func track(t testing.TB, r jobs.Registry, id string, lease time.Duration) jobs.Job {
	t.Helper()
	j, err := r.Track(ctxFor(t), jobs.Job{ID: id, Payload: []byte("payload of " + id), Owner: "worker-a"}, lease)
	if err != nil {
		t.Fatalf("Track(%s): %v", id, err)
	}
	return j
}

// waitExpired polls until Expired reports want jobs (the registry's clock
// decides, not ours), for at most 10 s.
func waitExpired(t testing.TB, r jobs.Registry, want int) []jobs.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := r.Expired(ctxFor(t), 0)
		if err != nil {
			t.Fatalf("Expired: %v", err)
		}
		if len(got) >= want || time.Now().After(deadline) {
			if len(got) != want {
				t.Fatalf("Expired: %d jobs, want %d", len(got), want)
			}
			return got
		}
		<-time.After(20 * time.Millisecond)
	}
}

func expectStale(t testing.TB, err error, what string) {
	t.Helper()
	if !errors.Is(err, jobs.ErrStale) {
		t.Fatalf("%s: %v, want ErrStale", what, err)
	}
}

func trackAndDone(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	before := time.Now()
	payload := []byte{0, 1, 2, 0xff, 0}
	j, err := r.Track(ctx, jobs.Job{ID: "a", Payload: payload, Owner: "worker-a", Attempt: 2}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if j.Epoch == 0 || j.Owner != "worker-a" || j.Attempt != 2 || !bytes.Equal(j.Payload, payload) {
		t.Fatalf("Track returned %+v", j)
	}
	if d := j.Deadline.Sub(before); d < 50*time.Second || d > 70*time.Second {
		t.Fatalf("deadline %v after now, want about the 1 min lease", d)
	}
	in, err := r.InFlight(ctx, 10)
	if err != nil || len(in) != 1 || in[0].ID != "a" || in[0].Epoch != j.Epoch || !bytes.Equal(in[0].Payload, payload) {
		t.Fatalf("InFlight = %+v, %v", in, err)
	}
	if c, err := r.Counts(ctx); err != nil || c != (jobs.Counts{Tracked: 1}) {
		t.Fatalf("Counts = %+v, %v", c, err)
	}
	if err := r.Done(ctx, j.Ref()); err != nil {
		t.Fatalf("Done: %v", err)
	}
	expectStale(t, r.Done(ctx, j.Ref()), "second Done")
	if c, err := r.Counts(ctx); err != nil || c != (jobs.Counts{}) {
		t.Fatalf("Counts after Done = %+v, %v", c, err)
	}
}

func retrack(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	old := track(t, r, "a", time.Minute)
	cur := track(t, r, "a", time.Minute)
	if cur.Epoch <= old.Epoch {
		t.Fatalf("epoch %d after %d", cur.Epoch, old.Epoch)
	}
	lost, err := r.Heartbeat(ctx, []jobs.Ref{old.Ref()}, time.Minute)
	if err != nil || !slices.Equal(lost, []string{"a"}) {
		t.Fatalf("Heartbeat of the old epoch: lost %v, %v", lost, err)
	}
	expectStale(t, r.Done(ctx, old.Ref()), "Done of the old epoch")
	if err := r.Done(ctx, cur.Ref()); err != nil {
		t.Fatalf("Done of the current epoch: %v", err)
	}
}

func heartbeat(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	var refs []jobs.Ref
	for i := range 100 {
		refs = append(refs, track(t, r, fmt.Sprintf("job-%03d", i), 300*time.Millisecond).Ref())
	}
	short := track(t, r, "left-alone", 300*time.Millisecond)
	bogus := jobs.Ref{ID: "never-tracked", Epoch: 1}
	lost, err := r.Heartbeat(ctx, append(refs, bogus), time.Minute)
	if err != nil || !slices.Equal(lost, []string{"never-tracked"}) {
		t.Fatalf("Heartbeat: lost %v, %v", lost, err)
	}
	got := waitExpired(t, r, 1)
	if got[0].ID != short.ID {
		t.Fatalf("expired %+v, want only the job without heartbeat", got)
	}
	if lost, err := r.Heartbeat(ctx, nil, time.Minute); err != nil || len(lost) != 0 {
		t.Fatalf("empty Heartbeat: %v, %v", lost, err)
	}
}

func expiredOrder(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	for i, id := range []string{"e", "d", "c", "b", "a"} {
		track(t, r, id, time.Duration(100+50*i)*time.Millisecond)
	}
	track(t, r, "later", time.Minute)
	waitExpired(t, r, 5)
	got, err := r.Expired(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range got {
		ids = append(ids, j.ID)
	}
	if !slices.Equal(ids, []string{"e", "d", "c"}) {
		t.Fatalf("Expired(3) = %v, want the three earliest deadlines [e d c]", ids)
	}
	if c, err := r.Counts(ctx); err != nil || c.Tracked != 6 || c.Expired != 5 {
		t.Fatalf("Counts = %+v, %v", c, err)
	}
}

func reclaim(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	live := track(t, r, "live", time.Minute)
	if _, err := r.Reclaim(ctx, live.Ref(), "recoverer", time.Minute); !errors.Is(err, jobs.ErrStale) {
		t.Fatalf("Reclaim of a job that has not expired: %v, want ErrStale", err)
	}
	j := track(t, r, "crashed", 100*time.Millisecond)
	waitExpired(t, r, 1)
	c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	if c.Epoch <= j.Epoch || c.Attempt != j.Attempt+1 || c.Owner != "recoverer" || string(c.Payload) != string(j.Payload) {
		t.Fatalf("Reclaim returned %+v (was %+v)", c, j)
	}
	if len(c.History) != 1 || c.History[0].From != "worker-a" || c.History[0].By != "recoverer" || c.History[0].Attempt != 1 {
		t.Fatalf("history %+v", c.History)
	}
	if got, _ := r.Expired(ctx, 0); len(got) != 0 {
		t.Fatalf("a reclaimed job is still expired: %+v", got)
	}
	_, err = r.Reclaim(ctx, j.Ref(), "another", time.Minute)
	expectStale(t, err, "a second Reclaim of the same epoch")
	// The zombie worker: its heartbeat and its completion are rejected.
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{j.Ref()}, time.Minute); err != nil || len(lost) != 1 {
		t.Fatalf("the zombie's heartbeat: lost %v, %v", lost, err)
	}
	expectStale(t, r.Done(ctx, j.Ref()), "the zombie's Done")
	expectStale(t, r.Remove(ctx, j.Ref()), "Remove with the old epoch")
	if err := r.Remove(ctx, c.Ref()); err != nil {
		t.Fatalf("Remove after a requeue: %v", err)
	}
	if cnt, _ := r.Counts(ctx); cnt.Tracked != 1 {
		t.Fatalf("Counts after Remove: %+v", cnt)
	}
}

func deadSet(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	j := track(t, r, "poison", 100*time.Millisecond)
	waitExpired(t, r, 1)
	c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	expectStale(t, r.Bury(ctx, j.Ref(), "old epoch"), "Bury with the old epoch")
	if err := r.Bury(ctx, c.Ref(), "crashed its workers"); err != nil {
		t.Fatalf("Bury: %v", err)
	}
	dead, err := r.Dead(ctx, 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("Dead = %+v, %v", dead, err)
	}
	d := dead[0]
	if d.ID != "poison" || d.Reason != "crashed its workers" || d.Attempt != 1 || len(d.History) != 1 || string(d.Payload) != "payload of poison" || d.DiedAt.IsZero() {
		t.Fatalf("dead job %+v", d)
	}
	if one, err := r.DeadJob(ctx, "poison"); err != nil || one.Epoch != c.Epoch {
		t.Fatalf("DeadJob = %+v, %v", one, err)
	}
	if cnt, _ := r.Counts(ctx); cnt != (jobs.Counts{Dead: 1}) {
		t.Fatalf("Counts = %+v", cnt)
	}
	if err := r.Purge(ctx, "poison"); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if err := r.Purge(ctx, "poison"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("second Purge: %v, want ErrNotFound", err)
	}
	if _, err := r.DeadJob(ctx, "poison"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("DeadJob after Purge: %v", err)
	}
}

func badInput(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	var nilCtx context.Context
	for name, err := range map[string]error{
		"empty ID":    func() error { _, err := r.Track(ctx, jobs.Job{}, time.Minute); return err }(),
		"zero lease":  func() error { _, err := r.Track(ctx, jobs.Job{ID: "x"}, 0); return err }(),
		"nil context": func() error { _, err := r.Track(nilCtx, jobs.Job{ID: "x"}, time.Minute); return err }(),
		"heartbeat lease": func() error {
			_, err := r.Heartbeat(ctx, []jobs.Ref{{ID: "x", Epoch: 1}}, -time.Second)
			return err
		}(),
		"reclaim lease": func() error { _, err := r.Reclaim(ctx, jobs.Ref{ID: "x", Epoch: 1}, "by", 0); return err }(),
	} {
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}
