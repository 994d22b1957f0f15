package registrytest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// The checks of a registry that splits its calls over a set into chunks
// (a heartbeat into statements or scripts of at most chunk jobs, a listing
// into pages): the backend's tests call them with its chunk sizes, and
// count its calls themselves.

// trackMany tracks n jobs named prefix-0 … prefix-(n−1), a few at a time,
// for lease, and returns them in that order.
func trackMany(t testing.TB, r jobs.Registry, prefix string, n int, lease time.Duration) []jobs.Job {
	t.Helper()
	out := make([]jobs.Job, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				id := fmt.Sprintf("%s-%d", prefix, i)
				out[i], errs[i] = r.Track(ctxFor(t), jobs.Job{ID: id, Payload: []byte("payload of " + id), Owner: "worker-a"}, lease)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Track: %v", err)
	}
	return out
}

func refsOf(js []jobs.Job) []jobs.Ref {
	refs := make([]jobs.Ref, len(js))
	for i, j := range js {
		refs[i] = j.Ref()
	}
	return refs
}

// deadlines returns the deadline of every job in flight, by ID (r must be
// a jobs.Inspector).
func deadlines(t testing.TB, r jobs.Registry) map[string]time.Time {
	t.Helper()
	v, ok := r.(jobs.Inspector)
	if !ok {
		t.Fatalf("%T is no jobs.Inspector", r)
	}
	all, err := v.InFlight(ctxFor(t), 0)
	if err != nil {
		t.Fatalf("InFlight: %v", err)
	}
	out := make(map[string]time.Time, len(all))
	for _, j := range all {
		if _, dup := out[j.ID]; dup {
			t.Fatalf("InFlight lists %s twice", j.ID)
		}
		out[j.ID] = j.Deadline
	}
	return out
}

// ChunkedHeartbeat checks a heartbeat of chunks·chunk + chunk/2 jobs that
// the registry sends in chunks of chunk: it extends every job of a
// matching epoch, whatever its chunk, and reports exactly the stale ones,
// among them the jobs on both sides of each chunk boundary, as one call
// over all of them did. r must be a jobs.Inspector.
func ChunkedHeartbeat(t testing.TB, r jobs.Registry, chunk, chunks int) {
	t.Helper()
	n := chunks*chunk + chunk/2
	js := trackMany(t, r, "hb", n, 10*time.Minute)
	refs := refsOf(js)
	// Stale: the jobs on both sides of every chunk boundary and the last.
	stale := map[string]bool{js[n-1].ID: true}
	for b := chunk; b < n; b += chunk {
		stale[js[b-1].ID], stale[js[b].ID] = true, true
	}
	for id := range stale {
		if _, err := r.Track(ctxFor(t), jobs.Job{ID: id, Owner: "worker-b"}, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	lost, err := r.Heartbeat(ctxFor(t), refs, time.Hour)
	if err != nil {
		t.Fatalf("Heartbeat of %d jobs: %v", n, err)
	}
	slices.Sort(lost)
	want := make([]string, 0, len(stale))
	for id := range stale {
		want = append(want, id)
	}
	slices.Sort(want)
	if !slices.Equal(lost, want) {
		t.Fatalf("Heartbeat of %d jobs in chunks of %d: lost %q, want the stale %q", n, chunk, lost, want)
	}
	extended := time.Now().Add(30 * time.Minute)
	for id, d := range deadlines(t, r) {
		if stale[id] == d.After(extended) {
			t.Fatalf("%s (stale %v): deadline %v after the heartbeat", id, stale[id], d)
		}
	}
}

// FailedChunk checks a heartbeat of chunks·chunk jobs whose chunk number
// failed (from 0) fails on the server: poison(id) is called with a job of
// that chunk and must make the call of its chunk fail; the restore it
// returns undoes that after the heartbeat. The heartbeat
// returns a *jobs.HeartbeatError that names exactly the jobs of that
// chunk, reports none of them lost, and extends every job of the other
// chunks; the jobs of the failed chunk are still tracked. r must be a
// jobs.Inspector.
func FailedChunk(t testing.TB, r jobs.Registry, chunk, chunks, failed int, poison func(id string) (restore func())) {
	t.Helper()
	n := chunks * chunk
	js := trackMany(t, r, "fc", n, 10*time.Minute)
	lo, hi := failed*chunk, (failed+1)*chunk
	restore := poison(js[lo+chunk/2].ID)
	lost, err := r.Heartbeat(ctxFor(t), refsOf(js), time.Hour)
	restore()
	var he *jobs.HeartbeatError
	if !errors.As(err, &he) {
		t.Fatalf("Heartbeat with chunk %d failing: %v, want a *jobs.HeartbeatError", failed, err)
	}
	if len(lost) != 0 {
		t.Fatalf("Heartbeat with chunk %d failing: lost %q, want none", failed, lost)
	}
	var want []string
	for _, j := range js[lo:hi] {
		want = append(want, j.ID)
	}
	if !slices.Equal(he.Unknown, want) {
		t.Fatalf("Heartbeat with chunk %d failing: unknown %q, want the chunk's %q", failed, he.Unknown, want)
	}
	ds := deadlines(t, r)
	extended := time.Now().Add(30 * time.Minute)
	for i, j := range js {
		d, ok := ds[j.ID]
		if !ok {
			t.Fatalf("%s is no longer tracked", j.ID)
		}
		if inFailed := i >= lo && i < hi; !inFailed && !d.After(extended) {
			t.Fatalf("%s of chunk %d was not extended (deadline %v)", j.ID, i/chunk, d)
		}
	}
}

// Pages checks the listings across their pages: n jobs whose deadlines
// are shared by groups of them (one heartbeat gives its chunk one
// deadline), so that pages end inside a group. Expired lists each once,
// earliest first, whole or up to a limit; InFlight lists each once;
// jobs.Runner.Scan requeues each once; after burials Dead lists each dead
// job once, the most recent first; Inspector.Counts counts each once. r
// must be a jobs.Inspector.
func Pages(t testing.TB, r jobs.Registry, n int) {
	t.Helper()
	ctx := ctxFor(t)
	js := trackMany(t, r, "pg", n, time.Hour)
	if lost, err := r.Heartbeat(ctx, refsOf(js), time.Millisecond); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat: lost %q, %v", lost, err)
	}
	live := trackMany(t, r, "live", 3, time.Hour)
	expired := waitExpired(t, r, n)
	checkOnce(t, "Expired", expired, n)
	for i := 1; i < len(expired); i++ {
		if expired[i].Deadline.Before(expired[i-1].Deadline) {
			t.Fatalf("Expired: %s (%v) after %s (%v)", expired[i].ID, expired[i].Deadline, expired[i-1].ID, expired[i-1].Deadline)
		}
	}
	if some, err := r.Expired(ctx, n/2+1); err != nil || len(some) != n/2+1 {
		t.Fatalf("Expired(%d): %d jobs, %v", n/2+1, len(some), err)
	} else {
		checkOnce(t, "Expired with a limit", some, n/2+1)
	}
	ds := deadlines(t, r)
	if len(ds) != n+len(live) {
		t.Fatalf("InFlight: %d jobs, want %d", len(ds), n+len(live))
	}
	checkCounts(t, r.(jobs.Inspector), jobs.Counts{Tracked: int64(n + len(live)), Expired: int64(n)})

	// Bury a few (the dead set's pages), recover the others.
	buried := min(n/3, 40)
	for _, j := range expired[:buried] {
		c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Bury(ctx, c.Ref(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	requeued := map[string]int{}
	l, err := memlock.New()
	if err != nil {
		t.Fatal(err)
	}
	runner, err := jobs.NewRunner(r, l, func(_ context.Context, j jobs.Job, _ time.Duration) error {
		mu.Lock()
		defer mu.Unlock()
		requeued[j.ID]++
		return nil
	}, jobs.WithScanBatch(min(n, jobs.MaxScanBatch)), jobs.WithRetryBackoff(0, 0),
		jobs.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	if got := runner.Scan(ctx); got != n-buried {
		t.Fatalf("Scan requeued %d jobs, want %d", got, n-buried)
	}
	for _, j := range expired[buried:] {
		if requeued[j.ID] != 1 {
			t.Fatalf("Scan requeued %s %d times, want once", j.ID, requeued[j.ID])
		}
	}
	if got := runner.Scan(ctx); got != 0 {
		t.Fatalf("a second Scan requeued %d jobs, want none", got)
	}
	dead, err := r.(jobs.Inspector).Dead(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, d := range dead {
		if seen[d.ID] {
			t.Fatalf("Dead lists %s twice", d.ID)
		}
		seen[d.ID] = true
		if i > 0 && d.DiedAt.After(dead[i-1].DiedAt) {
			t.Fatalf("Dead: %s (died %v) after %s (died %v)", d.ID, d.DiedAt, dead[i-1].ID, dead[i-1].DiedAt)
		}
	}
	if len(dead) != buried {
		t.Fatalf("Dead: %d jobs, want %d", len(dead), buried)
	}
	checkCounts(t, r.(jobs.Inspector), jobs.Counts{Tracked: int64(len(live)), Dead: int64(buried)})
}

// checkOnce fails unless js are want distinct jobs.
func checkOnce(t testing.TB, what string, js []jobs.Job, want int) {
	t.Helper()
	seen := map[string]bool{}
	for _, j := range js {
		if seen[j.ID] {
			t.Fatalf("%s lists %s twice", what, j.ID)
		}
		seen[j.ID] = true
	}
	if len(seen) != want {
		t.Fatalf("%s: %d jobs, want %d", what, len(seen), want)
	}
}
