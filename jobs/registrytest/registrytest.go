// Package registrytest is the conformance suite of jobs.Registry: memjobs,
// redisjobs and pgjobs run it against a real server, and so should any
// other implementation.
//
//	registrytest.Run(t, func(t testing.TB) jobs.Registry { return newRegistry(t) })
//
// The factory returns a registry over fresh, empty state (its own namespace
// or table prefix) for each call.
//
// The operator's view (jobs.Inspector) is optional: when the registry
// implements it, the suite checks it too — its counts and listings after
// each step, and the cases about it alone (ListingLimits' InFlight and
// Dead, ListingsHaveNoPayloads); a registry without it runs the recovery
// protocol's checks only, and the view's cases skip. memjobs, redisjobs
// and pgjobs implement it (asserted at compile time), so nothing of theirs
// skips.
package registrytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
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
		{"DoneIsIdempotentPerEpoch", doneIdempotent},
		{"OpaqueIDs", opaqueIDs},
		{"OwnersAndReasons", ownersAndReasons},
		{"LeaseLimits", leaseLimits},
		{"ListingLimits", listingLimits},
		{"ListingsHaveNoPayloads", listingsWithoutPayloads},
		{"RetrackKeepsTheCount", retrackKeepsTheCount},
		{"RetryRecordEndsWithTheJob", retryRecordEnds},
		{"MaxRetriesIsKept", maxRetriesKept},
		{"ResultsAreTheCallers", resultsAreTheCallers},
		{"PurgeBurialIsOfOneBurial", purgeBurial},
		{"BatchRecovery", batchRecovery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newRegistry(t))
		})
	}
}

// withView runs check with r's operator view when r has one
// (jobs.Inspector); a registry without it leaves the check out.
func withView(r jobs.Registry, check func(v jobs.Inspector)) {
	if v, ok := r.(jobs.Inspector); ok {
		check(v)
	}
}

// needView returns r's operator view, or skips t when r has none.
func needView(t *testing.T, r jobs.Registry) jobs.Inspector {
	t.Helper()
	v, ok := r.(jobs.Inspector)
	if !ok {
		t.Skipf("%T is no jobs.Inspector: the operator's view is optional", r)
	}
	return v
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
	withView(r, func(v jobs.Inspector) {
		in, err := v.InFlight(ctx, 10)
		if err != nil || len(in) != 1 || in[0].ID != "a" || in[0].Epoch != j.Epoch || in[0].Payload != nil {
			t.Fatalf("InFlight = %+v, %v", in, err)
		}
		checkCounts(t, v, jobs.Counts{Tracked: 1})
	})
	if err := r.Done(ctx, j.Ref()); err != nil {
		t.Fatalf("Done: %v", err)
	}
	if err := r.Done(ctx, j.Ref()); err != nil {
		t.Fatalf("second Done of the completed epoch: %v, want nil", err)
	}
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{j.Ref()}, time.Minute); err != nil || len(lost) != 1 {
		t.Fatalf("Heartbeat after Done: lost %v, %v; want the job gone", lost, err)
	}
	withView(r, func(v jobs.Inspector) { checkCounts(t, v, jobs.Counts{}) })
}

// checkCounts fails unless v counts want.
func checkCounts(t testing.TB, v jobs.Inspector, want jobs.Counts) {
	t.Helper()
	if c, err := v.Counts(ctxFor(t)); err != nil || c != want {
		t.Fatalf("Counts = %+v, %v; want %+v", c, err, want)
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
	withView(r, func(v jobs.Inspector) { checkCounts(t, v, jobs.Counts{Tracked: 6, Expired: 5}) })
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
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{live.Ref(), c.Ref()}, time.Minute); err != nil || !slices.Equal(lost, []string{"crashed"}) {
		t.Fatalf("Heartbeat after Remove: lost %v, %v; want only the removed job", lost, err)
	}
	withView(r, func(v jobs.Inspector) { checkCounts(t, v, jobs.Counts{Tracked: 1}) })
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
	withView(r, func(v jobs.Inspector) {
		dead, err := v.Dead(ctx, 10)
		if err != nil || len(dead) != 1 {
			t.Fatalf("Dead = %+v, %v", dead, err)
		}
		d := dead[0]
		if d.ID != "poison" || d.Reason != "crashed its workers" || d.Attempt != 1 || len(d.History) != 1 || d.Payload != nil || d.DiedAt.IsZero() {
			t.Fatalf("dead job %+v", d)
		}
		checkCounts(t, v, jobs.Counts{Dead: 1})
	})
	one, err := r.DeadJob(ctx, "poison")
	if err != nil || one.ID != "poison" || one.Epoch != c.Epoch || string(one.Payload) != "payload of poison" ||
		one.Reason != "crashed its workers" || one.Attempt != 1 || len(one.History) != 1 || one.DiedAt.IsZero() {
		t.Fatalf("DeadJob = %+v, %v", one, err)
	}
	if got, err := r.Expired(ctx, 0); err != nil || len(got) != 0 {
		t.Fatalf("a buried job is still expired: %+v, %v", got, err)
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

// purgeBurial: a BurialPurger purges the burial it names alone, and
// leaves the ID's retry record. A job buried, tracked again (a Revive),
// reclaimed and buried again has a new dead record: a purge of the first
// burial leaves it, and one of the new burial deletes it. A job buried,
// tracked again, reclaimed and removed (requeued) has a retry record: a
// purge of the burial leaves it to the job's next Track.
func purgeBurial(t *testing.T, r jobs.Registry) {
	bp, ok := r.(jobs.BurialPurger)
	if !ok {
		t.Skipf("%T is no jobs.BurialPurger: purging one burial is optional", r)
	}
	ctx := ctxFor(t)
	reclaimed := func(id string) jobs.Job {
		t.Helper()
		j := track(t, r, id, time.Millisecond)
		waitExpired(t, r, 1)
		c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
		if err != nil {
			t.Fatalf("Reclaim: %v", err)
		}
		return c
	}
	bury := func(id string) jobs.Ref {
		t.Helper()
		c := reclaimed(id)
		if err := r.Bury(ctx, c.Ref(), "crashed its workers"); err != nil {
			t.Fatalf("Bury: %v", err)
		}
		return c.Ref()
	}
	first := bury("twice")
	if d, err := r.DeadJob(ctx, "twice"); err != nil || d.Ref() != first {
		t.Fatalf("DeadJob = %+v, %v; want the burial %+v", d, err, first)
	}
	second := bury("twice")
	if second == first {
		t.Fatalf("two burials of one ID have one epoch: %+v", first)
	}
	if err := bp.PurgeBurial(ctx, first); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("PurgeBurial of a burial replaced by a newer one: %v, want ErrNotFound", err)
	}
	if d, err := r.DeadJob(ctx, "twice"); err != nil || d.Ref() != second {
		t.Fatalf("DeadJob after the purge of the older burial = %+v, %v; want the newer burial %+v", d, err, second)
	}
	if err := bp.PurgeBurial(ctx, second); err != nil {
		t.Fatalf("PurgeBurial: %v", err)
	}
	if _, err := r.DeadJob(ctx, "twice"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("DeadJob after PurgeBurial: %v, want ErrNotFound", err)
	}
	if err := bp.PurgeBurial(ctx, second); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("second PurgeBurial: %v, want ErrNotFound", err)
	}
	if err := bp.PurgeBurial(ctx, jobs.Ref{ID: "twice\x00", Epoch: second.Epoch}); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("PurgeBurial of an ID never buried: %v, want ErrNotFound", err)
	}

	buried := bury("later")
	c := reclaimed("later") // its later life: revived, its worker crashed
	if err := r.Remove(ctx, c.Ref()); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := bp.PurgeBurial(ctx, buried); err != nil {
		t.Fatalf("PurgeBurial: %v", err)
	}
	again := track(t, r, "later", time.Minute)
	if again.Attempt != 1 || len(again.History) != 1 {
		t.Fatalf("Track after PurgeBurial of an earlier burial: attempt %d, history %d; want the later life's retry record (1, 1)", again.Attempt, len(again.History))
	}
}

func badInput(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	var nilCtx context.Context
	for name, err := range map[string]error{
		"empty ID":    func() error { _, err := r.Track(ctx, jobs.Job{}, time.Minute); return err }(),
		"zero lease":  func() error { _, err := r.Track(ctx, jobs.Job{ID: "x"}, 0); return err }(),
		"nil context": func() error { _, err := r.Track(nilCtx, jobs.Job{ID: "x"}, time.Minute); return err }(),
		"reclaim, nil context": func() error {
			_, err := r.Reclaim(nilCtx, jobs.Ref{ID: "x", Epoch: 1}, "by", time.Minute)
			return err
		}(),
		"remove, nil context":    r.Remove(nilCtx, jobs.Ref{ID: "x", Epoch: 1}),
		"done, nil context":      r.Done(nilCtx, jobs.Ref{ID: "x", Epoch: 1}),
		"bury, nil context":      r.Bury(nilCtx, jobs.Ref{ID: "x", Epoch: 1}, "reason"),
		"heartbeat, nil context": func() error { _, err := r.Heartbeat(nilCtx, []jobs.Ref{{ID: "x", Epoch: 1}}, time.Minute); return err }(),
		"heartbeat lease": func() error {
			_, err := r.Heartbeat(ctx, []jobs.Ref{{ID: "x", Epoch: 1}}, -time.Second)
			return err
		}(),
		"reclaim lease": func() error { _, err := r.Reclaim(ctx, jobs.Ref{ID: "x", Epoch: 1}, "by", 0); return err }(),
		"heartbeat of an empty ID": func() error {
			_, err := r.Heartbeat(ctx, []jobs.Ref{{ID: "x", Epoch: 1}, {ID: "", Epoch: 1}}, time.Minute)
			return err
		}(),
		"heartbeat of a long ID": func() error {
			_, err := r.Heartbeat(ctx, []jobs.Ref{{ID: strings.Repeat("i", lock.MaxKeyLen+1), Epoch: 1}}, time.Minute)
			return err
		}(),
	} {
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// doneIdempotent: a Done of an epoch that completed returns nil again (a
// retry whose first attempt took effect), also after the ID was tracked
// anew; a Done of an epoch that did not complete (reclaimed, replaced,
// removed) is ErrStale.
func doneIdempotent(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	a := track(t, r, "a", time.Minute)
	for i := range 3 {
		if err := r.Done(ctx, a.Ref()); err != nil {
			t.Fatalf("Done #%d of the same epoch: %v, want nil", i+1, err)
		}
	}
	withView(r, func(v jobs.Inspector) {
		if in, err := v.InFlight(ctx, 0); err != nil || len(in) != 0 {
			t.Fatalf("InFlight after Done: %+v, %v", in, err)
		}
	})
	// The ID tracked again: the completed epoch still answers nil, and its
	// retried Done leaves the new epoch alone.
	a2 := track(t, r, "a", time.Minute)
	if err := r.Done(ctx, a.Ref()); err != nil {
		t.Fatalf("Done of the completed epoch after a new Track: %v, want nil", err)
	}
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{a2.Ref()}, time.Minute); err != nil || len(lost) != 0 {
		t.Fatalf("the new epoch after a retried Done of the old one: lost %v, %v", lost, err)
	}
	// Replaced without completing: stale.
	a3 := track(t, r, "a", time.Minute)
	expectStale(t, r.Done(ctx, a2.Ref()), "Done of an epoch replaced by a new Track")
	if err := r.Done(ctx, a3.Ref()); err != nil {
		t.Fatal(err)
	}

	// The zombie: its epoch was reclaimed, not completed.
	z := track(t, r, "zombie", 100*time.Millisecond)
	waitExpired(t, r, 1)
	c, err := r.Reclaim(ctx, z.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	expectStale(t, r.Done(ctx, z.Ref()), "Done of a reclaimed epoch")
	if err := r.Done(ctx, c.Ref()); err != nil {
		t.Fatalf("Done of the reclaimed job's new epoch: %v", err)
	}
	if err := r.Done(ctx, c.Ref()); err != nil {
		t.Fatalf("Done retried after the new epoch completed: %v, want nil", err)
	}
	expectStale(t, r.Done(ctx, z.Ref()), "Done of a reclaimed epoch after the job completed")

	// Removed by the recoverer (after a requeue): not a completion.
	x := track(t, r, "requeued", time.Minute)
	if err := r.Remove(ctx, x.Ref()); err != nil {
		t.Fatal(err)
	}
	expectStale(t, r.Done(ctx, x.Ref()), "Done of a removed epoch")
	expectStale(t, r.Done(ctx, jobs.Ref{ID: "never-tracked", Epoch: 1}), "Done of a job never tracked")
	withView(r, func(v jobs.Inspector) { checkCounts(t, v, jobs.Counts{}) })
}

// OddIDs are job IDs that are valid (1 to lock.MaxKeyLen bytes) but
// contain what an encoding could trip on: NUL, record and field
// separators, control characters, invalid UTF-8, braces, SQL patterns.
var OddIDs = []string{
	"nul\x00inside", "\x00", "sep\x1erecord\x1ffield", "line\nfeed\ttab\x1b[31mred",
	"\xff\xfe not UTF-8", "{brace}:colon", `%_like\`, "12:34", "ünïcødé ✓",
	strings.Repeat("l", lock.MaxKeyLen),
}

// opaqueIDs: an ID is opaque bytes, and every method hands it back
// exactly: track, heartbeat, expired, reclaim, bury, dead, revive, purge,
// done.
func opaqueIDs(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	byID := map[string]jobs.Job{}
	var refs []jobs.Ref
	for _, id := range OddIDs {
		j := track(t, r, id, 300*time.Millisecond)
		if j.ID != id {
			t.Fatalf("Track(%.40q) returned ID %.40q", id, j.ID)
		}
		byID[id] = j
		refs = append(refs, j.Ref())
	}
	withView(r, func(v jobs.Inspector) {
		in, err := v.InFlight(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkIDs(t, "InFlight", in, byID)
	})
	if lost, err := r.Heartbeat(ctx, refs, 300*time.Millisecond); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat: lost %q, %v", lost, err)
	}
	expired := waitExpired(t, r, len(OddIDs))
	checkIDs(t, "Expired", expired, byID)
	const reason = "reason with \x1e and \x1f,\nnew line"
	for _, j := range expired {
		if string(j.Payload) != "payload of "+j.ID {
			t.Fatalf("payload of %.40q: %.40q", j.ID, j.Payload)
		}
		c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
		if err != nil || c.ID != j.ID {
			t.Fatalf("Reclaim(%.40q) = %.40q, %v", j.ID, c.ID, err)
		}
		if len(c.History) != 1 || c.History[0].From != "worker-a" {
			t.Fatalf("history of %.40q: %+v", j.ID, c.History)
		}
		if err := r.Bury(ctx, c.Ref(), reason); err != nil {
			t.Fatalf("Bury(%.40q): %v", j.ID, err)
		}
	}
	withView(r, func(v jobs.Inspector) {
		dead, err := v.Dead(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		var deadJobs []jobs.Job
		for _, d := range dead {
			if d.Reason != reason || len(d.History) != 1 {
				t.Fatalf("dead job %.40q: reason %q, history %+v", d.ID, d.Reason, d.History)
			}
			deadJobs = append(deadJobs, d.Job)
		}
		checkIDs(t, "Dead", deadJobs, byID)
	})
	for i, id := range OddIDs {
		d, err := r.DeadJob(ctx, id)
		if err != nil || d.ID != id || d.Reason != reason || len(d.History) != 1 {
			t.Fatalf("DeadJob(%.40q) = %.40q %q %+v, %v", id, d.ID, d.Reason, d.History, err)
		}
		if i%2 == 0 {
			if err := r.Purge(ctx, id); err != nil {
				t.Fatalf("Purge(%.40q): %v", id, err)
			}
			continue
		}
		// Retried: tracked anew, completed (twice, as a retried Done).
		j, err := jobs.Revive(ctx, r, id, "operator")
		if err != nil || j.ID != id {
			t.Fatalf("Revive(%.40q) = %.40q, %v", id, j.ID, err)
		}
		for range 2 {
			if err := r.Done(ctx, j.Ref()); err != nil {
				t.Fatalf("Done(%.40q): %v", id, err)
			}
		}
	}
	for _, id := range OddIDs {
		if _, err := r.DeadJob(ctx, id); !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("DeadJob(%.40q) after its purge or revival: %v, want ErrNotFound", id, err)
		}
	}
	if got, err := r.Expired(ctx, 0); err != nil || len(got) != 0 {
		t.Fatalf("Expired after every job completed: %d jobs, %v", len(got), err)
	}
	withView(r, func(v jobs.Inspector) { checkCounts(t, v, jobs.Counts{}) })
}

// checkIDs fails unless got holds exactly the jobs of want, by ID and
// epoch.
func checkIDs(t testing.TB, what string, got []jobs.Job, want map[string]jobs.Job) {
	t.Helper()
	seen := map[string]bool{}
	for _, j := range got {
		w, ok := want[j.ID]
		if !ok || seen[j.ID] {
			t.Fatalf("%s: unexpected or repeated ID %.60q", what, j.ID)
		}
		if w.Epoch != j.Epoch && what != "Dead" {
			t.Fatalf("%s: %.40q has epoch %d, want %d", what, j.ID, j.Epoch, w.Epoch)
		}
		seen[j.ID] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("%s: %d of the %d IDs", what, len(seen), len(want))
	}
}

// ownersAndReasons: owners are identities (backendkit.CheckOwner), refused with
// an error that names the argument; the ones accepted round-trip through
// the history exactly, with the time of the recovery.
func ownersAndReasons(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	ref := jobs.Ref{ID: "j", Epoch: 1}
	for _, tc := range []struct {
		name, arg string
		err       error
	}{
		{"record separator in Owner", "Owner", func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "rec\x1eover"}, time.Minute)
			return err
		}()},
		{"field separator in Owner", "Owner", func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "rec\x1fover"}, time.Minute)
			return err
		}()},
		{"invalid UTF-8 Owner", "Owner", func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "\xff"}, time.Minute)
			return err
		}()},
		{"separator in History", "History[0].From", func() error {
			h := []jobs.Recovery{{At: time.Now(), From: "a\x1eb", By: "c", Attempt: 1}}
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w", Attempt: 1, History: h}, time.Minute)
			return err
		}()},
		{"negative Attempt", "Attempt", func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w", Attempt: -1}, time.Minute)
			return err
		}()},
		{"negative MaxRetries", "MaxRetries", func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w", MaxRetries: -1}, time.Minute)
			return err
		}()},
		{"huge MaxRetries", "MaxRetries", func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w", MaxRetries: jobs.MaxAttempt + 1}, time.Minute)
			return err
		}()},
		{"huge Attempt", "Attempt", func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w", Attempt: jobs.MaxAttempt + 1}, time.Minute)
			return err
		}()},
		{"separator in by", "by", func() error { _, err := r.Reclaim(ctx, ref, "x\x1fy", time.Minute); return err }()},
		{"empty by", "by", func() error { _, err := r.Reclaim(ctx, ref, "", time.Minute); return err }()},
		{"NUL in reason", "reason", r.Bury(ctx, ref, "a\x00b")},
		{"invalid UTF-8 reason", "reason", r.Bury(ctx, ref, "\xff")},
		{"long reason", "reason", r.Bury(ctx, ref, strings.Repeat("r", jobs.MaxReasonLen+1))},
	} {
		if !errors.Is(tc.err, lock.ErrInvalidArgument) || !strings.Contains(tc.err.Error(), tc.arg) {
			t.Errorf("%s: %v, want ErrInvalidArgument naming %s", tc.name, tc.err, tc.arg)
		}
	}
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{{ID: "j", Epoch: 1}}, time.Minute); err != nil || len(lost) != 1 {
		t.Fatalf("refused input left a job in flight: Heartbeat lost %v, %v", lost, err)
	}
	withView(r, func(v jobs.Inspector) {
		if in, err := v.InFlight(ctx, 0); err != nil || len(in) != 0 {
			t.Fatalf("refused input left jobs in flight: %+v, %v", in, err)
		}
	})

	owner, by := "worker α/7 (pid 42) {host}", "recoverer β"
	start := time.Now()
	j, err := r.Track(ctx, jobs.Job{ID: "j", Owner: owner}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitExpired(t, r, 1)
	c, err := r.Reclaim(ctx, j.Ref(), by, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.History) != 1 {
		t.Fatalf("history %+v", c.History)
	}
	h := c.History[0]
	if h.From != owner || h.By != by || h.Attempt != 1 || h.At.Before(start.Add(-time.Minute)) || h.At.After(time.Now().Add(time.Minute)) {
		t.Fatalf("history entry %+v, want From %q By %q Attempt 1 at about now", h, owner, by)
	}
	// Tracked again with that history (a requeued job restarted): kept.
	again, err := r.Track(ctx, jobs.Job{ID: "j", Owner: owner, Attempt: c.Attempt, History: c.History}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.History) != 1 || again.History[0].From != owner || again.History[0].By != by || !again.History[0].At.Equal(h.At) {
		t.Fatalf("Track with a history returned %+v, want %+v", again.History, h)
	}
	withView(r, func(v jobs.Inspector) {
		in, err := v.InFlight(ctx, 0)
		if err != nil || len(in) != 1 || len(in[0].History) != 1 || in[0].History[0].From != owner || in[0].History[0].By != by {
			t.Fatalf("InFlight after tracking with a history: %+v, %v", in, err)
		}
	})
	if err := r.Done(ctx, again.Ref()); err != nil {
		t.Fatal(err)
	}
}

// leaseLimits: a lease is 1 ms to lock.MaxTTL in every method that takes
// one (lock.ErrInvalidTTL otherwise, never an overflowed deadline), and
// the longest converts without overflow.
func leaseLimits(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	ref := jobs.Ref{ID: "x", Epoch: 1}
	for _, lease := range []time.Duration{math.MaxInt64, lock.MaxTTL + 1, time.Millisecond - 1, 0, -time.Second, math.MinInt64} {
		for name, err := range map[string]error{
			"Track":     func() error { _, err := r.Track(ctx, jobs.Job{ID: "x", Owner: "w"}, lease); return err }(),
			"Heartbeat": func() error { _, err := r.Heartbeat(ctx, []jobs.Ref{ref}, lease); return err }(),
			"Reclaim":   func() error { _, err := r.Reclaim(ctx, ref, "by", lease); return err }(),
		} {
			if !errors.Is(err, lock.ErrInvalidTTL) {
				t.Errorf("%s with lease %v: %v, want ErrInvalidTTL", name, lease, err)
			}
		}
	}
	before := time.Now()
	j, err := r.Track(ctx, jobs.Job{ID: "x", Owner: "w"}, lock.MaxTTL)
	if err != nil {
		t.Fatalf("Track with lease lock.MaxTTL: %v", err)
	}
	if d := j.Deadline.Sub(before); d < lock.MaxTTL-time.Minute || d > lock.MaxTTL+time.Minute {
		t.Fatalf("deadline %v from now, want lock.MaxTTL", d)
	}
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{j.Ref()}, lock.MaxTTL); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat with lease lock.MaxTTL: lost %v, %v", lost, err)
	}
	if got, err := r.Expired(ctx, 0); err != nil || len(got) != 0 {
		t.Fatalf("Expired = %+v, %v: a job of the longest lease must not be expired", got, err)
	}
	withView(r, func(v jobs.Inspector) {
		in, err := v.InFlight(ctx, 0)
		if err != nil || len(in) != 1 || in[0].Deadline.Sub(before) < lock.MaxTTL-time.Minute {
			t.Fatalf("InFlight after the longest heartbeat: %+v, %v", in, err)
		}
		checkCounts(t, v, jobs.Counts{Tracked: 1})
	})
	if err := r.Done(ctx, j.Ref()); err != nil {
		t.Fatal(err)
	}
}

// listingLimits: any limit is a valid limit: 0 and below mean all, and a
// huge one (math.MaxInt) is all there is, never an error from a
// conversion (Expired; and InFlight and Dead of the operator's view).
func listingLimits(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	for _, id := range []string{"a", "b", "c"} {
		track(t, r, id, 100*time.Millisecond)
	}
	waitExpired(t, r, 3)
	c := track(t, r, "c", 100*time.Millisecond)
	waitExpired(t, r, 3)
	c2, err := r.Reclaim(ctx, c.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bury(ctx, c2.Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	v, view := r.(jobs.Inspector)
	for _, limit := range []int{math.MaxInt, math.MaxInt32, 1 << 40, 0, -1, math.MinInt} {
		if got, err := r.Expired(ctx, limit); err != nil || len(got) != 2 {
			t.Errorf("Expired(%d): %d jobs, %v; want 2", limit, len(got), err)
		}
		if !view {
			continue
		}
		if got, err := v.InFlight(ctx, limit); err != nil || len(got) != 2 {
			t.Errorf("InFlight(%d): %d jobs, %v; want 2", limit, len(got), err)
		}
		if got, err := v.Dead(ctx, limit); err != nil || len(got) != 1 {
			t.Errorf("Dead(%d): %d jobs, %v; want 1", limit, len(got), err)
		}
	}
}

// listingsWithoutPayloads: the operator listings (InFlight, Dead) carry
// every field but the payload, which stays nil however large it is stored
// (a view of many jobs must not move their payloads); Expired, which the
// recovery scan requeues from, and DeadJob, one dead job, return it whole.
func listingsWithoutPayloads(t *testing.T, r jobs.Registry) {
	v := needView(t, r)
	ctx := ctxFor(t)
	payload := bytes.Repeat([]byte{0, 'p', 0xff}, 10<<10/3)
	j, err := r.Track(ctx, jobs.Job{ID: "big", Payload: payload, Owner: "worker-a"}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Track(ctx, jobs.Job{ID: "small", Payload: []byte("x"), Owner: "worker-b", Attempt: 3}, time.Minute); err != nil {
		t.Fatal(err)
	}
	expired := waitExpired(t, r, 1)
	if expired[0].ID != "big" || !bytes.Equal(expired[0].Payload, payload) {
		t.Fatalf("Expired: %.40q with a payload of %d bytes, want big with its %d", expired[0].ID, len(expired[0].Payload), len(payload))
	}
	in, err := v.InFlight(ctx, 0)
	if err != nil || len(in) != 2 {
		t.Fatalf("InFlight = %d jobs, %v", len(in), err)
	}
	for _, got := range in {
		if got.Payload != nil {
			t.Fatalf("InFlight lists %.40q with a payload of %d bytes, want none", got.ID, len(got.Payload))
		}
	}
	if in[0].ID != "big" || in[0].Epoch != j.Epoch || in[0].Owner != "worker-a" || in[1].ID != "small" || in[1].Owner != "worker-b" || in[1].Attempt != 3 {
		t.Fatalf("InFlight lists %+v", in)
	}
	c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil || !bytes.Equal(c.Payload, payload) {
		t.Fatalf("Reclaim: a payload of %d bytes, %v; want its %d", len(c.Payload), err, len(payload))
	}
	if err := r.Bury(ctx, c.Ref(), "dead with its payload"); err != nil {
		t.Fatal(err)
	}
	dead, err := v.Dead(ctx, 0)
	if err != nil || len(dead) != 1 {
		t.Fatalf("Dead = %d jobs, %v", len(dead), err)
	}
	if d := dead[0]; d.ID != "big" || d.Payload != nil || d.Reason != "dead with its payload" || d.Attempt != 1 || len(d.History) != 1 || d.DiedAt.IsZero() {
		t.Fatalf("Dead lists %.40q (%d payload bytes, reason %q, attempt %d, history %+v), want big without its payload", d.ID, len(d.Payload), d.Reason, d.Attempt, d.History)
	}
	one, err := r.DeadJob(ctx, "big")
	if err != nil || !bytes.Equal(one.Payload, payload) || one.Reason != "dead with its payload" {
		t.Fatalf("DeadJob: a payload of %d bytes, %v; want it whole (%d)", len(one.Payload), err, len(payload))
	}
	// Revive puts it back in flight with its payload, from DeadJob.
	back, err := jobs.Revive(ctx, r, "big", "operator")
	if err != nil || !bytes.Equal(back.Payload, payload) {
		t.Fatalf("Revive: a payload of %d bytes, %v", len(back.Payload), err)
	}
	expired = waitExpired(t, r, 1)
	if !bytes.Equal(expired[0].Payload, payload) {
		t.Fatalf("revived job expired with a payload of %d bytes, want %d", len(expired[0].Payload), len(payload))
	}
}

// Requeued plays a crashed worker and the recoverer on r: it tracks the
// job id (owner "worker-a", with maxRetries) with a lease of a millisecond,
// reclaims it as "recoverer" once it has expired on the registry's clock
// (within 10 s) and removes it, as Runner does after a requeue, leaving
// its retry record. It returns the job as reclaimed. Registry packages use
// it in tests of their own (the expiry of retry records).
func Requeued(t testing.TB, r jobs.Registry, id string, maxRetries int) jobs.Job {
	t.Helper()
	j, err := r.Track(ctxFor(t), jobs.Job{ID: id, Owner: "worker-a", MaxRetries: maxRetries}, time.Millisecond)
	if err != nil {
		t.Fatalf("Track(%.40q): %v", id, err)
	}
	return recoverAndRequeue(t, r, j)
}

// recoverAndRequeue plays the recoverer on the tracked job j: once it has
// expired (within 10 s), reclaims it and removes it (after a requeue),
// leaving its retry record; it returns the reclaimed job.
func recoverAndRequeue(t testing.TB, r jobs.Registry, j jobs.Job) jobs.Job {
	t.Helper()
	ctx := ctxFor(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
		if err == nil {
			if err := r.Remove(ctx, c.Ref()); err != nil {
				t.Fatalf("Remove(%.40q): %v", j.ID, err)
			}
			return c
		}
		if !errors.Is(err, jobs.ErrStale) || time.Now().After(deadline) {
			t.Fatalf("Reclaim(%.40q): %v", j.ID, err)
		}
		<-time.After(5 * time.Millisecond)
	}
}

// checkCount fails unless j has the attempt, history length and
// MaxRetries given.
func checkCount(t testing.TB, what string, j jobs.Job, attempt, history, maxRetries int) {
	t.Helper()
	if j.Attempt != attempt || len(j.History) != history || j.MaxRetries != maxRetries {
		t.Fatalf("%s: Attempt %d, %d recoveries in History, MaxRetries %d; want %d, %d, %d",
			what, j.Attempt, len(j.History), j.MaxRetries, attempt, history, maxRetries)
	}
}

// retrackKeepsTheCount: the registry keeps a job's count of recoveries by
// ID, whatever the caller passes. A job reclaimed and removed (requeued)
// and then tracked again as Job{ID, Payload} — as a queue hands it back —
// has the Attempt, History and MaxRetries it had: a poison job reaches
// the dead set however its workers carry it. The retry record is not in
// flight, and the next Track consumes it; an ID tracked again while in
// flight keeps its count too; a caller's higher Attempt, or its own
// MaxRetries, wins.
func retrackKeepsTheCount(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	j, err := r.Track(ctx, jobs.Job{ID: "p", Payload: []byte("x"), Owner: "worker-a", MaxRetries: 3}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c := recoverAndRequeue(t, r, j)
	checkCount(t, "reclaimed", c, 1, 1, 3)
	// The retry record is no job in flight.
	if got, err := r.Expired(ctx, 0); err != nil || len(got) != 0 {
		t.Fatalf("Expired with a retry record: %+v, %v", got, err)
	}
	withView(r, func(v jobs.Inspector) {
		checkCounts(t, v, jobs.Counts{})
		if in, err := v.InFlight(ctx, 0); err != nil || len(in) != 0 {
			t.Fatalf("InFlight with a retry record: %+v, %v", in, err)
		}
	})
	// Taken back from a queue that stores ID and payload only.
	again, err := r.Track(ctx, jobs.Job{ID: "p", Payload: []byte("x"), Owner: "worker-b"}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	checkCount(t, "tracked again as Job{ID, Payload}", again, 1, 1, 3)
	if h := again.History[0]; h.From != "worker-a" || h.By != "recoverer" || h.Attempt != 1 {
		t.Fatalf("history taken over: %+v", h)
	}
	withView(r, func(v jobs.Inspector) {
		in, err := v.InFlight(ctx, 0)
		if err != nil || len(in) != 1 {
			t.Fatalf("InFlight = %+v, %v", in, err)
		}
		checkCount(t, "InFlight", in[0], 1, 1, 3)
	})
	// A second round: the count goes on.
	c = recoverAndRequeue(t, r, again)
	checkCount(t, "reclaimed again", c, 2, 2, 3)
	if c.History[1].From != "worker-b" {
		t.Fatalf("history %+v", c.History)
	}
	third, err := r.Track(ctx, jobs.Job{ID: "p", Owner: "worker-c"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkCount(t, "tracked a third time", third, 2, 2, 3)
	// The record was consumed: the ID tracked again while in flight
	// (a duplicate from the queue) keeps the entry's count.
	dup, err := r.Track(ctx, jobs.Job{ID: "p", Owner: "worker-d"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkCount(t, "tracked again while in flight", dup, 2, 2, 3)
	// A caller's higher Attempt (with its history) and its own MaxRetries win.
	mine := []jobs.Recovery{{At: time.Now(), From: "w1", By: "r1", Attempt: 1}}
	own, err := r.Track(ctx, jobs.Job{ID: "p", Owner: "worker-e", Attempt: 4, History: mine, MaxRetries: 9}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	checkCount(t, "tracked with a higher Attempt", own, 4, 1, 9)
	c = recoverAndRequeue(t, r, own)
	checkCount(t, "reclaimed with its own count", c, 5, 2, 9)
	back, err := r.Track(ctx, jobs.Job{ID: "p", Owner: "worker-f", Attempt: 1, MaxRetries: 2}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkCount(t, "tracked with a lower Attempt and its own MaxRetries", back, 5, 2, 2)
	if err := r.Done(ctx, back.Ref()); err != nil {
		t.Fatal(err)
	}
}

// retryRecordEnds: a job's count ends with it — Done, Bury and Purge
// leave no retry record, and a later Track of its ID starts afresh — and
// a Purge that finds no dead job leaves the record alone.
func retryRecordEnds(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	fresh := func(what, id string) jobs.Job {
		t.Helper()
		j, err := r.Track(ctx, jobs.Job{ID: id, Owner: "worker-a"}, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		checkCount(t, what, j, 0, 0, 0)
		return j
	}
	// Done: the count was taken over by the entry that Done removes.
	d := fresh("first run", "done")
	recoverAndRequeue(t, r, d)
	d, err := r.Track(ctx, jobs.Job{ID: "done", Owner: "worker-b", MaxRetries: 2}, time.Minute)
	if err != nil || d.Attempt != 1 {
		t.Fatalf("Track after a requeue: %+v, %v", d, err)
	}
	if err := r.Done(ctx, d.Ref()); err != nil {
		t.Fatal(err)
	}
	fresh("tracked after Done", "done")

	// Bury: the dead job keeps the count; a new job of its ID starts at 0.
	b := fresh("first run", "bury")
	waitExpired(t, r, 2) // "done" (tracked again) and "bury"
	rb, err := r.Reclaim(ctx, b.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bury(ctx, rb.Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	if dead, err := r.DeadJob(ctx, "bury"); err != nil || dead.Attempt != 1 || len(dead.History) != 1 {
		t.Fatalf("DeadJob = %+v, %v", dead, err)
	}
	expectStale(t, r.Remove(ctx, rb.Ref()), "Remove of a buried job")
	fresh("tracked after Bury", "bury")

	// Purge: a dead job whose ID was requeued again (a RetryDead that
	// crashed before its Purge, the job taken, its worker crashed): the
	// Purge drops the retry record with the dead job.
	for _, j := range waitExpired(t, r, 2) { // "done" and "bury", tracked afresh
		c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Remove(ctx, c.Ref()); err != nil {
			t.Fatal(err)
		}
	}
	// "done" has a retry record and no dead job: Purge is ErrNotFound and
	// leaves the record; "bury" has both: Purge drops both.
	if err := r.Purge(ctx, "done"); !errors.Is(err, jobs.ErrNotFound) {
		t.Fatalf("Purge of a job that is not dead: %v, want ErrNotFound", err)
	}
	if err := r.Purge(ctx, "bury"); err != nil {
		t.Fatal(err)
	}
	kept, err := r.Track(ctx, jobs.Job{ID: "done", Owner: "worker-c"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkCount(t, "tracked after a Purge that found no dead job", kept, 1, 1, 0)
	purged, err := r.Track(ctx, jobs.Job{ID: "bury", Owner: "worker-c"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkCount(t, "tracked after Purge", purged, 0, 0, 0)
	withView(r, func(v jobs.Inspector) { checkCounts(t, v, jobs.Counts{Tracked: 2}) })
}

// maxRetriesKept: a job's MaxRetries is stored with it and carried by
// every method that returns the job: Track, Expired, Reclaim, the dead
// set (DeadJob), the operator listings, and jobs.Revive.
func maxRetriesKept(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	j, err := r.Track(ctx, jobs.Job{ID: "m", Payload: []byte("x"), Owner: "worker-a", MaxRetries: 7}, 100*time.Millisecond)
	if err != nil || j.MaxRetries != 7 {
		t.Fatalf("Track = %+v, %v", j, err)
	}
	withView(r, func(v jobs.Inspector) {
		if in, err := v.InFlight(ctx, 0); err != nil || len(in) != 1 || in[0].MaxRetries != 7 {
			t.Fatalf("InFlight = %+v, %v", in, err)
		}
	})
	exp := waitExpired(t, r, 1)
	if exp[0].MaxRetries != 7 {
		t.Fatalf("Expired = %+v", exp)
	}
	c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil || c.MaxRetries != 7 {
		t.Fatalf("Reclaim = %+v, %v", c, err)
	}
	if err := r.Bury(ctx, c.Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	if d, err := r.DeadJob(ctx, "m"); err != nil || d.MaxRetries != 7 {
		t.Fatalf("DeadJob = %+v, %v", d, err)
	}
	withView(r, func(v jobs.Inspector) {
		if dead, err := v.Dead(ctx, 0); err != nil || len(dead) != 1 || dead[0].MaxRetries != 7 {
			t.Fatalf("Dead = %+v, %v", dead, err)
		}
	})
	// Revived: a new job (Attempt 0), with its own MaxRetries still.
	if back, err := jobs.Revive(ctx, r, "m", "operator"); err != nil || back.Attempt != 0 || back.MaxRetries != 7 {
		t.Fatalf("Revive = %+v, %v", back, err)
	}
}

// DoneAndBuryDropRetryRecords checks that Done and Bury drop the retry
// record of their job's ID even when one exists beside the entry, which
// the API alone never leaves (Track consumes the record) but a race of a
// Remove and a Track on a database can: put writes, the way r stores it, a
// retry record of Attempt 3 and MaxRetries 2 for an ID that is in flight.
// After the job's Done, or its Bury, a Track of the ID starts from
// Attempt 0: the count ended with the job.
func DoneAndBuryDropRetryRecords(t testing.TB, r jobs.Registry, put func(id string)) {
	t.Helper()
	ctx := ctxFor(t)
	d := track(t, r, "done", time.Minute)
	b := track(t, r, "buried", time.Millisecond)
	put("done")
	put("buried")
	if err := r.Done(ctx, d.Ref()); err != nil {
		t.Fatal(err)
	}
	waitExpired(t, r, 1)
	c, err := r.Reclaim(ctx, b.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bury(ctx, c.Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"done", "buried"} {
		j, err := r.Track(ctx, jobs.Job{ID: id, Owner: "worker-b"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		checkCount(t, "tracked after the Done or Bury of "+id, j, 0, 0, 0)
	}
}

// resultsAreTheCallers: the jobs a registry returns are the caller's.
// Writing into the Payload or History of what Track, Expired, Reclaim and
// DeadJob returned (a handler that decodes in place, a buffer reused)
// changes nothing the registry recorded. memjobs handed out its own
// slices.
func resultsAreTheCallers(t *testing.T, r jobs.Registry) {
	ctx := ctxFor(t)
	scribble := func(j jobs.Job) {
		for i := range j.Payload {
			j.Payload[i] = 'X'
		}
		for i := range j.History {
			j.History[i].By = "scribbled"
		}
	}
	check := func(what string, j jobs.Job, history int) {
		t.Helper()
		if string(j.Payload) != "payload of j" || len(j.History) != history || history > 0 && j.History[history-1].By != "recoverer" {
			t.Fatalf("%s after a caller wrote into the jobs returned: payload %q, history %+v", what, j.Payload, j.History)
		}
	}
	j := track(t, r, "j", 100*time.Millisecond)
	scribble(j)
	expired := waitExpired(t, r, 1)
	check("Expired", expired[0], 0)
	scribble(expired[0])
	c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	check("Reclaim", c, 1)
	scribble(c)
	if err := r.Bury(ctx, c.Ref(), "test"); err != nil {
		t.Fatalf("Bury: %v", err)
	}
	d, err := r.DeadJob(ctx, "j")
	if err != nil {
		t.Fatalf("DeadJob: %v", err)
	}
	check("DeadJob", d.Job, 1)
	scribble(d.Job)
	if d, err = r.DeadJob(ctx, "j"); err != nil {
		t.Fatalf("DeadJob: %v", err)
	}
	check("DeadJob again", d.Job, 1)
}
