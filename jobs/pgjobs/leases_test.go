package pgjobs_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
)

// trackN tracks n jobs prefix-0 … prefix-(n−1) for lease.
func trackN(t *testing.T, r *pgjobs.Registry, prefix string, n int, lease time.Duration) []jobs.Job {
	t.Helper()
	js := make([]jobs.Job, n)
	for i := range js {
		j, err := r.Track(t.Context(), jobs.Job{ID: fmt.Sprintf("%s-%d", prefix, i), Owner: "w"}, lease)
		if err != nil {
			t.Fatal(err)
		}
		js[i] = j
	}
	return js
}

func refsOf(js []jobs.Job) []jobs.Ref {
	refs := make([]jobs.Ref, len(js))
	for i, j := range js {
		refs[i] = j.Ref()
	}
	return refs
}

// heartbeat fails the test unless exactly want are lost.
func heartbeat(t *testing.T, r *pgjobs.Registry, refs []jobs.Ref, lease time.Duration, want ...string) {
	t.Helper()
	lost, err := r.Heartbeat(t.Context(), refs, lease)
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	slices.Sort(lost)
	slices.Sort(want)
	if !slices.Equal(lost, want) && len(lost)+len(want) > 0 {
		t.Fatalf("Heartbeat: lost %q, want %q", lost, want)
	}
}

// deadlineOf returns the deadlines of the jobs in flight (InFlight: the
// effective ones), by ID.
func deadlineOf(t *testing.T, r *pgjobs.Registry) map[string]time.Time {
	t.Helper()
	all, err := r.InFlight(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, j := range all {
		out[j.ID] = j.Deadline
	}
	return out
}

// checkMembers fails the test unless every lease row counts exactly the
// jobs in it, and has some.
func checkMembers(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	rows, _ := pool.Query(t.Context(), strings.NewReplacer("T_", table).Replace(`
SELECT coalesce(l.id, j.lease), coalesce(l.members, 0), coalesce(j.n, 0)
FROM T__lease l FULL JOIN (SELECT lease, count(*) AS n FROM T_ WHERE lease IS NOT NULL GROUP BY lease) j ON j.lease = l.id
WHERE l.members IS DISTINCT FROM j.n`))
	bad, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Lease, Members, Jobs int64 }])
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("leases whose count is not their members (lease, members, jobs): %v", bad)
	}
}

// registryOf returns a new Registry of table (its own cache of leases, as
// in another process).
func registryOf(t *testing.T, pool *pgxpool.Pool, table string) *pgjobs.Registry {
	t.Helper()
	r, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// twoRegistries returns two registries of one new table (each its own
// cache of leases, as in two processes).
func twoRegistries(t *testing.T, prefix string) (*pgxpool.Pool, *pgjobs.Registry, *pgjobs.Registry, string) {
	pool := newPool(t)
	a, table := newRegistry(t, pool, prefix)
	b, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	return pool, a, b, table
}

// leased tracks n jobs in a new registry, in leases of 10 (in order: one
// open lease at a time), and heartbeats them for lease.
func leased(t *testing.T, prefix string, n int, lease time.Duration) (*pgxpool.Pool, *pgjobs.Registry, string, []jobs.Job, []jobs.Ref) {
	pool := newPool(t)
	pgjobs.SetTrackSlots(t, 1)
	r, table := newRegistry(t, pool, prefix)
	pgjobs.SetHeartbeatChunk(t, 10)
	js := trackN(t, r, prefix, n, time.Hour)
	refs := refsOf(js)
	heartbeat(t, r, refs, lease)
	return pool, r, table, js, refs
}

// A steady heartbeat extends each lease whole: a registry that did not
// track the jobs (ForgetLeases: a process that starts) and adopts no lease
// (SetMovesOnly) moves them into leases of HeartbeatChunk (one statement
// each) at its first heartbeat, the next ones send one statement per 25
// leases and move no job.
func TestSteadyHeartbeatExtendsLeasesWhole(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "steady")
	pgjobs.SetHeartbeatChunk(t, 10)
	js := trackN(t, r, "s", 35, time.Minute)
	refs := refsOf(js)
	pgjobs.ForgetLeases(r)
	pgjobs.SetMovesOnly(r)
	heartbeat(t, r, refs, time.Hour)
	if fast, slow := pgjobs.HeartbeatStatements(r); fast != 0 || slow != 4 {
		t.Fatalf("first heartbeat of 35 jobs in leases of 10: %d extending and %d moving statements, want 0 and 4", fast, slow)
	}
	for i := range 3 {
		heartbeat(t, r, refs, time.Duration(2+i)*time.Hour)
		if fast, slow := pgjobs.HeartbeatStatements(r); fast != int64(i+1) || slow != 4 {
			t.Fatalf("heartbeat %d: %d extending and %d moving statements in all, want %d and 4", i+2, fast, slow, i+1)
		}
		for id, d := range deadlineOf(t, r) {
			if time.Until(d) < time.Duration(2+i)*time.Hour-time.Minute {
				t.Fatalf("heartbeat %d: %s ends at %v", i+2, id, d)
			}
		}
	}
	checkMembers(t, pool, table)
}

// Jobs that another Registry completed, removed, buried, reclaimed or
// tracked again between two heartbeats are reported lost, and the others of their
// leases extended: a lease that lost a member fails the extending
// statement (its count changed), and its jobs move.
func TestJobsTakenElsewhereAreLost(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1) // leases of 10 jobs in order
	pool, a, b, table := twoRegistries(t, "elsewhere")
	pgjobs.SetHeartbeatChunk(t, 10)
	ctx := t.Context()
	js := trackN(t, a, "e", 40, time.Minute)
	refs := refsOf(js)
	heartbeat(t, a, refs, time.Hour)
	heartbeat(t, a, refs, time.Hour) // fast: all four leases extended
	if err := b.Done(ctx, js[0].Ref()); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, js[11].Ref()); err != nil {
		t.Fatal(err)
	}
	if err := b.Bury(ctx, js[12].Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Track(ctx, jobs.Job{ID: js[31].ID, Owner: "other"}, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	// js[25]'s lease expires (the server's clock moved on), b reclaims it.
	if _, err := pool.Exec(ctx, "UPDATE "+table+"_lease SET deadline = now() - interval '1 second' WHERE id = (SELECT lease FROM "+table+" WHERE id = $1)", []byte(js[25].ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reclaim(ctx, js[25].Ref(), "recoverer", time.Minute); err != nil {
		t.Fatal(err)
	}
	checkMembers(t, pool, table)
	_, slowBefore := pgjobs.HeartbeatStatements(a)
	heartbeat(t, a, refs, 2*time.Hour, js[0].ID, js[11].ID, js[12].ID, js[25].ID, js[31].ID)
	if _, slow := pgjobs.HeartbeatStatements(a); slow-slowBefore != 4 {
		t.Fatalf("%d moving statements for the 40 jobs of 4 leases that lost members, want 4 (in chunks of 10)", slow-slowBefore)
	}
	ds := deadlineOf(t, a)
	for i, j := range js {
		switch i {
		case 0, 11, 12:
			if _, ok := ds[j.ID]; ok {
				t.Fatalf("%s is still in flight", j.ID)
			}
		case 25:
			if time.Until(ds[j.ID]) > 2*time.Minute {
				t.Fatalf("the reclaimed %s was extended: ends at %v", j.ID, ds[j.ID])
			}
		case 31:
			if in, _ := a.InFlight(ctx, 0); !slices.ContainsFunc(in, func(x jobs.Job) bool { return x.ID == j.ID && x.Owner == "other" }) {
				t.Fatalf("the re-tracked %s is not in flight as the other's", j.ID)
			}
		default:
			if time.Until(ds[j.ID]) < 2*time.Hour-time.Minute {
				t.Fatalf("%s was not extended: ends at %v", j.ID, ds[j.ID])
			}
		}
	}
	checkMembers(t, pool, table)
	heartbeat(t, a, slices.Delete(refs, 25, 26), time.Hour, js[0].ID, js[11].ID, js[12].ID, js[31].ID)
	checkMembers(t, pool, table)
}

// A job the caller leaves out of its heartbeats stays in its old lease and
// expires with it; the other jobs of that lease move and stay.
func TestDroppedJobExpires(t *testing.T) {
	pool, r, table, js, refs := leased(t, "dropped", 20, 50*time.Millisecond)
	kept := slices.Delete(slices.Clone(refs), 3, 4)
	heartbeat(t, r, kept, time.Hour)
	heartbeat(t, r, kept, time.Hour)
	var expired []jobs.Job
	for end := time.Now().Add(10 * time.Second); len(expired) == 0 && time.Now().Before(end); <-time.After(10 * time.Millisecond) {
		var err error
		if expired, err = r.Expired(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(expired) != 1 || expired[0].ID != js[3].ID {
		t.Fatalf("Expired: %+v, want only %s", expired, js[3].ID)
	}
	for id, d := range deadlineOf(t, r) {
		if id != js[3].ID && time.Until(d) < 50*time.Minute {
			t.Fatalf("%s ends at %v", id, d)
		}
	}
	if _, err := r.Reclaim(t.Context(), js[3].Ref(), "recoverer", time.Minute); err != nil {
		t.Fatal(err)
	}
	checkMembers(t, pool, table)
}

// A Reclaim that races a heartbeat of the same expired job never succeeds
// when the heartbeat extends the job: the Reclaim waits for the lease row
// that the heartbeat updates and re-checks its deadline; the heartbeat's
// extension fails when the Reclaim took a member first. Run many times,
// over the extending path (the lease cached), the moving one, and the
// adopting one (a registry that did not track the jobs locates them and
// extends their leases whole).
func TestReclaimRacesHeartbeat(t *testing.T) {
	pool, r, other, table := twoRegistries(t, "race")
	mover, adopter := registryOf(t, pool, table), registryOf(t, pool, table)
	pgjobs.SetMovesOnly(mover)
	ctx := t.Context()
	pgjobs.SetHeartbeatChunk(t, 4)
	const rounds, n = 60, 8
	both, adoptedJobs := 0, 0
	for round := range rounds {
		js := trackN(t, r, fmt.Sprint("r", round), n, time.Hour)
		refs := refsOf(js)
		heartbeat(t, r, refs, time.Hour)
		before := leasesOf(t, pool, table, js)
		hb := r // cached: the race is with the extending statement
		switch round % 3 {
		case 1:
			hb = mover // the race is with the moving statement
		case 2:
			hb = adopter // with the locating and the adopting ones
		}
		if _, err := pool.Exec(ctx, "UPDATE "+table+"_lease SET deadline = now() - interval '1 second'"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var lost []string
		var hbErr error
		reclaimed := make([]error, n)
		wg.Go(func() { lost, hbErr = hb.Heartbeat(ctx, refs, time.Hour) })
		for i := range n {
			wg.Go(func() { _, reclaimed[i] = other.Reclaim(ctx, js[i].Ref(), "recoverer", time.Hour) })
		}
		wg.Wait()
		if hbErr != nil {
			t.Fatal(hbErr)
		}
		for i, j := range js {
			switch alive := !slices.Contains(lost, j.ID); {
			case alive && reclaimed[i] == nil:
				t.Errorf("round %d: %s both extended by the heartbeat and reclaimed", round, j.ID)
			case !alive && reclaimed[i] != nil:
				t.Errorf("round %d: %s lost by the heartbeat, and its Reclaim failed: %v", round, j.ID, reclaimed[i])
			case !alive:
				both++
			}
		}
		if hb == adopter {
			for i, l := range leasesOf(t, pool, table, js) {
				if l != 0 && l == before[i] {
					adoptedJobs++ // extended, in the lease it was in
				}
			}
		}
		checkMembers(t, pool, table)
	}
	t.Logf("%d of %d jobs reclaimed first; %d of %d extended in their lease by the adopting registry", both, rounds*n, adoptedJobs, rounds/3*n)
}

// Tables of the layout before leases (an index on deadline, no lease
// column) are migrated by Setup: the column and the new indexes added, the
// old index dropped, and their jobs work on.
func TestSetupMigratesToLeases(t *testing.T) {
	pool := newPool(t)
	table := fmt.Sprintf("test_jobs_preleases_%d", tables.Add(1))
	ctx := t.Context()
	old := strings.NewReplacer("T_", table).Replace(`
CREATE SEQUENCE T__epoch;
CREATE TABLE T_ (id bytea PRIMARY KEY, payload bytea NOT NULL, owner text NOT NULL, attempt int NOT NULL,
	epoch bigint NOT NULL, deadline timestamptz NOT NULL, history jsonb NOT NULL DEFAULT '[]', max_retries int NOT NULL DEFAULT 0);
CREATE INDEX T__deadline ON T_ (deadline);
CREATE TABLE T__dead (id bytea PRIMARY KEY, payload bytea NOT NULL, owner text NOT NULL, attempt int NOT NULL,
	epoch bigint NOT NULL, deadline timestamptz NOT NULL, history jsonb NOT NULL, died timestamptz NOT NULL, reason text NOT NULL,
	max_retries int NOT NULL DEFAULT 0);
CREATE INDEX T__dead_died ON T__dead (died);
INSERT INTO T_ (id, payload, owner, attempt, epoch, deadline)
	SELECT convert_to('old-' || i, 'UTF8'), 'p', 'w', 0, nextval('T__epoch'),
		CASE WHEN i = 0 THEN now() - interval '1 second' ELSE now() + interval '1 hour' END
	FROM generate_series(0, 4) i;`)
	if _, err := pool.Exec(ctx, old); err != nil {
		t.Fatal(err)
	}
	r, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _ := pool.Query(ctx, "SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY 1", table)
	idx, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{table + "_leased", table + "_pkey", table + "_solo"}; !slices.Equal(idx, want) {
		t.Fatalf("indexes after Setup: %q, want %q", idx, want)
	}
	expired, err := r.Expired(ctx, 0)
	if err != nil || len(expired) != 1 || expired[0].ID != "old-0" {
		t.Fatalf("Expired after the migration: %+v, %v", expired, err)
	}
	in, err := r.InFlight(ctx, 0)
	if err != nil || len(in) != 5 {
		t.Fatalf("InFlight after the migration: %d jobs, %v", len(in), err)
	}
	var refs []jobs.Ref
	for _, j := range in[1:] {
		refs = append(refs, j.Ref())
	}
	heartbeat(t, r, refs, 2*time.Hour)
	heartbeat(t, r, refs, 3*time.Hour)
	// The first moves them into a lease with the statement that locates
	// them (in no lease), the second extends that lease whole.
	if got, want := statementsOf(r), (statements{fast: 1, locate: 1}); got != want {
		t.Fatalf("heartbeats of migrated jobs: statements %+v, want %+v", got, want)
	}
	if _, err := r.Reclaim(ctx, expired[0].Ref(), "recoverer", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.Done(ctx, refs[0]); err != nil {
		t.Fatal(err)
	}
	c, err := r.Counts(ctx)
	if err != nil || c.Tracked != 4 || c.Expired != 0 {
		t.Fatalf("Counts after the migration: %+v, %v", c, err)
	}
	checkMembers(t, pool, table)
}

// A ref listed twice counts once: a heartbeat that lists one job of a
// lease twice and leaves the other out does not extend the lease whole.
func TestDuplicateRefCountsOnce(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "dup")
	js := trackN(t, r, "u", 2, time.Hour)
	heartbeat(t, r, refsOf(js), time.Minute)
	a := js[0].Ref()
	heartbeat(t, r, []jobs.Ref{a, a}, 2*time.Hour)
	ds := deadlineOf(t, r)
	if time.Until(ds[js[1].ID]) > 2*time.Minute || time.Until(ds[js[0].ID]) < time.Hour {
		t.Fatalf("after a heartbeat of %s twice: deadlines %v; want %s's unchanged", a.ID, ds, js[1].ID)
	}
	checkMembers(t, pool, table)
}

// Heartbeats of one Registry that run at once over shared jobs (one of
// all, one of some: it moves them out of the leases the other extends)
// never report a job extended that is not: each job either has the later
// deadline or is reported lost.
func TestConcurrentHeartbeatsOfOneRegistry(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "concurrent")
	pgjobs.SetHeartbeatChunk(t, 10)
	for round := range 20 {
		js := trackN(t, r, fmt.Sprint("c", round), 40, time.Hour)
		refs := refsOf(js)
		heartbeat(t, r, refs, time.Minute)
		heartbeat(t, r, refs, time.Minute)
		var wg sync.WaitGroup
		var lostAll, lostSome []string
		var errAll, errSome error
		wg.Go(func() { lostAll, errAll = r.Heartbeat(t.Context(), refs, 2*time.Hour) })
		wg.Go(func() { lostSome, errSome = r.Heartbeat(t.Context(), refs[5:25], 2*time.Hour) })
		wg.Wait()
		if errAll != nil || errSome != nil || len(lostAll)+len(lostSome) > 0 {
			t.Fatalf("round %d: lost %q and %q, %v, %v", round, lostAll, lostSome, errAll, errSome)
		}
		ds := deadlineOf(t, r)
		for _, j := range js {
			if time.Until(ds[j.ID]) < time.Hour {
				t.Fatalf("round %d: %s reported extended, ends at %v", round, j.ID, ds[j.ID])
			}
		}
		checkMembers(t, pool, table)
	}
}

// Done, Remove and Bury that run at once with a heartbeat moving their
// jobs into new leases, or adopting their leases, keep every lease's count
// exact: a statement that finds its job moved into a lease made after it
// began is sent again.
func TestLeaversRaceMovingHeartbeat(t *testing.T) {
	pool, r, other, table := twoRegistries(t, "leavers")
	mover, adopter := registryOf(t, pool, table), registryOf(t, pool, table)
	pgjobs.SetMovesOnly(mover)
	pgjobs.SetHeartbeatChunk(t, 4)
	ctx := t.Context()
	for round := range 40 {
		js := trackN(t, r, fmt.Sprint("l", round), 12, time.Hour)
		refs := refsOf(js)
		heartbeat(t, r, refs, time.Hour)
		hb := mover // a registry that did not track the jobs: it moves them all
		if round%2 == 1 {
			hb = adopter // or adopts their leases
		}
		var wg sync.WaitGroup
		errs := make([]error, len(js))
		var hbErr error
		wg.Go(func() { _, hbErr = hb.Heartbeat(ctx, refs, time.Hour) })
		for i, j := range js {
			wg.Go(func() {
				switch i % 3 {
				case 0:
					errs[i] = other.Done(ctx, j.Ref())
				case 1:
					errs[i] = other.Remove(ctx, j.Ref())
				default:
					errs[i] = other.Bury(ctx, j.Ref(), "test")
				}
			})
		}
		wg.Wait()
		if hbErr != nil {
			t.Fatal(hbErr)
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %s: %v", round, js[i].ID, err)
			}
		}
		checkMembers(t, pool, table)
	}
}

// A heartbeat whose lease another heartbeat of the same Registry partly
// moved after the first one planned (so that its extension fails) moves
// every job of that lease it lists, those the other one did not move
// included: none is reported extended and left to expire.
func TestHeartbeatAfterAnotherMovedPartOfItsLease(t *testing.T) {
	pool, r, table, _, refs := leased(t, "interleaved", 10, time.Minute)
	planned, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	pgjobs.SetAfterPlan(r, func() {
		if calls.Add(1) == 1 {
			close(planned)
			<-release
		}
	})
	var lost []string
	var err error
	done := make(chan struct{})
	go func() { defer close(done); lost, err = r.Heartbeat(t.Context(), refs, 2*time.Hour) }()
	<-planned
	heartbeat(t, r, refs[5:], 2*time.Hour) // moves i-5 … i-9 out of the lease the first will extend
	close(release)
	<-done
	if err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat: lost %q, %v", lost, err)
	}
	for id, d := range deadlineOf(t, r) {
		if time.Until(d) < time.Hour {
			t.Fatalf("%s reported extended, ends at %v", id, d)
		}
	}
	checkMembers(t, pool, table)
}

// A heartbeat that lists a replaced epoch of a job beside its live one,
// in one moving statement, reports the replaced one lost. The moving
// statement found the lost refs by ID alone: the live epoch, moved, hid
// the replaced one, which was reported extended.
func TestReplacedEpochBesideItsLiveEpochIsLost(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1)
	pool, r, other, table := twoRegistries(t, "staleepoch")
	ctx := t.Context()
	track := func(id string) jobs.Ref {
		t.Helper()
		j, err := r.Track(ctx, jobs.Job{ID: id, Owner: "w"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return j.Ref()
	}
	a, x1, y1 := track("a"), track("x"), track("y") // one lease L
	x2, y2 := track("x"), track("y")                // x1, y1 replaced: x2, y2 in no lease
	heartbeat(t, r, []jobs.Ref{x2, y2}, time.Hour)  // located and moved into a new lease NL
	if err := other.Done(ctx, y2); err != nil {     // NL loses a member
		t.Fatal(err)
	}
	// Neither L nor NL can be extended whole: their five refs move, in one
	// statement.
	lost, err := r.Heartbeat(ctx, []jobs.Ref{a, x1, y1, x2, y2}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(lost); !slices.Equal(lost, []string{"x", "y", "y"}) {
		t.Fatalf("lost %q, want x (epoch %d, replaced by %d) and y twice (two epochs, one replaced, one done)", lost, x1.Epoch, x2.Epoch)
	}
	checkMembers(t, pool, table)
}
