package registrytest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock"
)

// batchRecovery: ReclaimEach and RemoveEach answer each ref as Reclaim and
// Remove would have, in order, in one batch of expired, live, unknown,
// stale, repeated and invalid refs; what they did is what the registry
// then holds (the reclaimed jobs in flight under their new epochs, the
// removed ones gone with their retry records left). A registry's Reclaim
// and Remove may be these with one ref (redisjobs and pgjobs are): the
// rest of the suite checks them one ref at a time.
func batchRecovery(t *testing.T, r jobs.Registry) {
	br, ok := r.(jobs.BatchRecoverer)
	if !ok {
		t.Skipf("%T is no jobs.BatchRecoverer: batched recovery is optional", r)
	}
	ctx := ctxFor(t)
	live := track(t, r, "live", time.Minute)
	a := track(t, r, "a", time.Millisecond)
	b := track(t, r, "b", time.Millisecond)
	const odd = "c\x00\\x'\"\xff{}" // opaque bytes: NUL, a backslash, quotes, no UTF-8
	c := track(t, r, odd, time.Millisecond)
	waitExpired(t, r, 3)

	if got := br.ReclaimEach(ctx, nil, "recoverer", time.Minute); len(got) != 0 {
		t.Fatalf("ReclaimEach of no refs: %v", got)
	}
	refs := []jobs.Ref{
		a.Ref(),
		live.Ref(),
		b.Ref(),
		a.Ref(),                          // listed twice: reclaimed once
		{ID: "never", Epoch: 1},          // never tracked
		{ID: "", Epoch: 1},               // invalid
		{ID: odd, Epoch: c.Epoch + 1000}, // not its epoch
		c.Ref(),
	}
	got := br.ReclaimEach(ctx, refs, "recoverer", time.Minute)
	if len(got) != len(refs) {
		t.Fatalf("ReclaimEach answered %d of %d refs", len(got), len(refs))
	}
	reclaimed := map[int]jobs.Job{0: a, 2: b, 7: c}
	epochs := map[uint64]bool{}
	for i, g := range got {
		was, ok := reclaimed[i]
		switch {
		case i == 5:
			if !errors.Is(g.Err, lock.ErrInvalidArgument) {
				t.Errorf("ReclaimEach of an empty ID: %v, want ErrInvalidArgument", g.Err)
			}
		case !ok:
			expectStale(t, g.Err, "ReclaimEach of "+refs[i].ID+" (live, repeated, unknown or of another epoch)")
		case g.Err != nil:
			t.Fatalf("ReclaimEach of expired %s: %v", refs[i].ID, g.Err)
		default:
			j := g.Job
			if j.ID != was.ID || j.Epoch <= was.Epoch || j.Attempt != was.Attempt+1 || j.Owner != "recoverer" ||
				string(j.Payload) != string(was.Payload) || len(j.History) != 1 || j.History[0].By != "recoverer" {
				t.Errorf("ReclaimEach of %s returned %+v (was %+v)", refs[i].ID, j, was)
			}
			if epochs[j.Epoch] {
				t.Errorf("two reclaimed jobs share epoch %d", j.Epoch)
			}
			epochs[j.Epoch] = true
		}
	}
	if e, _ := r.Expired(ctx, 0); len(e) != 0 {
		t.Fatalf("reclaimed jobs still expired: %+v", e)
	}
	a2, b2, c2 := got[0].Job, got[2].Job, got[7].Job
	if c2.ID != odd {
		t.Fatalf("ReclaimEach of %q returned the ID %q", odd, c2.ID)
	}

	if errs := br.RemoveEach(ctx, nil); len(errs) != 0 {
		t.Fatalf("RemoveEach of no refs: %v", errs)
	}
	errs := br.RemoveEach(ctx, []jobs.Ref{a2.Ref(), b.Ref(), a2.Ref(), {ID: "", Epoch: 1}, c2.Ref()})
	if len(errs) != 5 {
		t.Fatalf("RemoveEach answered %d of 5 refs", len(errs))
	}
	if errs[0] != nil || errs[4] != nil {
		t.Fatalf("RemoveEach of reclaimed jobs: %v, %v", errs[0], errs[4])
	}
	expectStale(t, errs[1], "RemoveEach of a reclaimed job's old epoch")
	expectStale(t, errs[2], "RemoveEach of a job removed earlier in the batch")
	if !errors.Is(errs[3], lock.ErrInvalidArgument) {
		t.Errorf("RemoveEach of an empty ID: %v, want ErrInvalidArgument", errs[3])
	}
	// What is left in flight: live, and b under its new epoch.
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{live.Ref(), b2.Ref(), a2.Ref(), c2.Ref()}, time.Minute); err != nil || !sameIDs(lost, "a", odd) {
		t.Fatalf("Heartbeat after RemoveEach: lost %q, %v; want a and %q", lost, err, odd)
	}
	withView(r, func(v jobs.Inspector) { checkCounts(t, v, jobs.Counts{Tracked: 2}) })
	// The removed jobs left their retry records.
	again := track(t, r, "a", time.Minute)
	checkCount(t, "a tracked again after RemoveEach", again, 1, 1, 0)

	// A nil context answers every ref with an error (ErrInvalidArgument).
	var nilCtx context.Context
	for _, g := range br.ReclaimEach(nilCtx, []jobs.Ref{b2.Ref(), live.Ref()}, "recoverer", time.Minute) {
		if !errors.Is(g.Err, lock.ErrInvalidArgument) {
			t.Fatalf("ReclaimEach under a nil context: %+v, want ErrInvalidArgument", g)
		}
	}
	for _, err := range br.RemoveEach(nilCtx, []jobs.Ref{b2.Ref(), live.Ref()}) {
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("RemoveEach under a nil context: %v, want ErrInvalidArgument", err)
		}
	}
	// An ended context answers every ref with its error, and does nothing.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, g := range br.ReclaimEach(ended, []jobs.Ref{b2.Ref(), live.Ref()}, "recoverer", time.Minute) {
		if g.Err == nil {
			t.Fatalf("ReclaimEach under an ended context: %+v", g)
		}
	}
	for _, err := range br.RemoveEach(ended, []jobs.Ref{b2.Ref(), live.Ref()}) {
		if err == nil {
			t.Fatal("RemoveEach under an ended context succeeded")
		}
	}
	if lost, err := r.Heartbeat(ctx, []jobs.Ref{live.Ref(), b2.Ref()}, time.Minute); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat after the batches under an ended context: lost %v, %v; want none", lost, err)
	}
}

// sameIDs reports whether got holds the IDs want, in any order.
func sameIDs(got []string, want ...string) bool {
	return len(got) == len(want) && !slices.ContainsFunc(want, func(id string) bool { return !slices.Contains(got, id) })
}
