package pgjobs_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
)

// statements are the heartbeat statements a registry sent.
type statements struct{ fast, slow, locate, adopt int64 }

func statementsOf(r *pgjobs.Registry) statements {
	fast, slow := pgjobs.HeartbeatStatements(r)
	locate, adopt := pgjobs.AdoptionStatements(r)
	return statements{fast, slow, locate, adopt}
}

// leasesOf returns the lease of each job of js, in order.
func leasesOf(t *testing.T, pool *pgxpool.Pool, table string, js []jobs.Job) []int64 {
	t.Helper()
	out := make([]int64, len(js))
	for i, j := range js {
		out[i] = leaseOf(t, pool, table, j.ID)
	}
	return out
}

// A registry that did not track the jobs adopts the leases of another
// whose every member it lists: four statements locate the 33 jobs (10 a
// statement), one
// extends the three whole leases (their jobs' rows untouched: they stay
// in their leases), one moves the 3 jobs of the fourth lease it lists
// (its 2 others stay behind, not extended). Its next heartbeat extends
// them all in two statements (the adopted leases, counted again on the
// server, and its own new lease) and locates nothing; the registry that
// made the leases still extends them whole.
func TestHeartbeatAdoptsAnotherRegistrysLeases(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1) // leases of 10 jobs in order
	pool, a, b, table := twoRegistries(t, "adopt")
	pgjobs.SetHeartbeatChunk(t, 10)
	if err := a.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	updates := countUpdates(t, pool, table)
	js := trackN(t, a, "a", 35, time.Minute)
	refs := refsOf(js)
	before := leasesOf(t, pool, table, js)
	heartbeat(t, b, refs[:33], time.Hour)
	if got, want := statementsOf(b), (statements{slow: 1, locate: 4, adopt: 1}); got != want {
		t.Fatalf("first heartbeat of 33 jobs of another registry's 4 leases: statements %+v, want %+v", got, want)
	}
	after := leasesOf(t, pool, table, js)
	if !slices.Equal(before[:30], after[:30]) || !slices.Equal(before[33:], after[33:]) {
		t.Fatalf("the jobs of the whole leases, or those not listed, changed lease: %v, then %v", before, after)
	}
	if after[30] == before[30] || after[30] != after[32] {
		t.Fatalf("the 3 listed jobs of the fourth lease were not moved into a lease together: %v, then %v", before[30:33], after[30:33])
	}
	if n := updates(); len(n) != 1 || n[0] != 3 {
		t.Fatalf("rows of jobs written by each statement: %v, want [3] (the moved jobs only)", n)
	}
	ds := deadlineOf(t, a)
	for i, j := range js {
		if extended := time.Until(ds[j.ID]) > 50*time.Minute; extended != (i < 33) {
			t.Fatalf("%s ends at %v (listed: %v)", j.ID, ds[j.ID], i < 33)
		}
	}
	heartbeat(t, b, refs[:33], 2*time.Hour)
	if got, want := statementsOf(b), (statements{fast: 1, slow: 1, locate: 4, adopt: 2}); got != want {
		t.Fatalf("second heartbeat: statements in all %+v, want %+v", got, want)
	}
	heartbeat(t, a, refs[:30], 3*time.Hour)
	if fast, slow := pgjobs.HeartbeatStatements(a); fast != 1 || slow != 0 {
		t.Fatalf("the maker's heartbeat of its three leases: %d extending and %d moving statements, want 1 and 0", fast, slow)
	}
	if n := updates(); len(n) != 0 {
		t.Fatalf("rows of jobs written since: %v, want none", n)
	}
	ds = deadlineOf(t, a)
	for _, j := range js[:30] {
		if time.Until(ds[j.ID]) < 3*time.Hour-time.Minute {
			t.Fatalf("%s ends at %v", j.ID, ds[j.ID])
		}
	}
	checkMembers(t, pool, table)
}

// An adopted lease is trusted only while the server counts in it every job
// the adopter lists: the registry that made it may complete one of them
// and join a new job into it, which leaves its count of members as it was.
// The adopter's next heartbeat reports the completed job lost, moves the
// others, and leaves the new job to its lease.
func TestAdoptedLeaseIsCountedOnTheServer(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1)
	pool, a, b, table := twoRegistries(t, "recount")
	ctx := t.Context()
	js := trackN(t, a, "a", 5, time.Minute)
	refs := refsOf(js)
	heartbeat(t, b, refs, time.Hour) // adopts the lease
	if got := statementsOf(b); got.adopt != 1 || got.slow != 0 {
		t.Fatalf("statements %+v, want one adopting and no moving one", got)
	}
	if err := a.Done(ctx, refs[0]); err != nil {
		t.Fatal(err)
	}
	joiner, err := a.Track(ctx, jobs.Job{ID: "joiner", Owner: "w"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l := leaseOf(t, pool, table, joiner.ID); l != leaseOf(t, pool, table, js[1].ID) {
		t.Fatalf("the new job is in lease %d, not in the adopted one: the test needs the join", l)
	}
	heartbeat(t, b, refs, 2*time.Hour, js[0].ID)
	ds := deadlineOf(t, a)
	if d := time.Until(ds[joiner.ID]); d > 90*time.Minute {
		t.Fatalf("the joined job, which the adopter does not list, was extended: ends in %v", d)
	}
	for _, j := range js[1:] {
		if time.Until(ds[j.ID]) < 2*time.Hour-time.Minute {
			t.Fatalf("%s was not extended: ends at %v", j.ID, ds[j.ID])
		}
	}
	checkMembers(t, pool, table)
}

// A job gone before the adopting heartbeat (completed by the registry that
// made its lease) is reported lost, and the other members of its lease,
// which the server counts as all of them, are adopted.
func TestAdoptionReportsAGoneJobLost(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1)
	pool, a, b, table := twoRegistries(t, "gone")
	js := trackN(t, a, "a", 6, time.Minute)
	refs := refsOf(js)
	if err := a.Done(t.Context(), refs[2]); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, b, refs, time.Hour, js[2].ID)
	if got := statementsOf(b); got.adopt != 1 {
		t.Fatalf("statements %+v, want one adopting", got)
	}
	ds := deadlineOf(t, a)
	for i, j := range js {
		if _, ok := ds[j.ID]; ok == (i == 2) {
			t.Fatalf("%s in flight: %v", j.ID, ok)
		}
		if i != 2 && time.Until(ds[j.ID]) < 50*time.Minute {
			t.Fatalf("%s was not extended: ends at %v", j.ID, ds[j.ID])
		}
	}
	checkMembers(t, pool, table)
}

// A heartbeat whose adopting statement fails on the server (a trigger
// raises an error for one lease row it extends) reports the jobs of that
// statement's leases as unknown, none as lost, and extends the others.
func TestAdoptionStatementFails(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1)
	pgjobs.SetHeartbeatChunk(t, 10)
	pgjobs.SetAdoptChunk(t, 2)
	pool, a, b, table := twoRegistries(t, "adoptfail")
	ctx := t.Context()
	js := trackN(t, a, "a", 40, time.Minute)
	refs := refsOf(js)
	poisoned := leaseOf(t, pool, table, js[0].ID)
	if _, err := pool.Exec(ctx, `CREATE FUNCTION `+table+`_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'poisoned'; END $$;
CREATE TRIGGER `+table+`_poison BEFORE UPDATE ON `+table+`_lease FOR EACH ROW
WHEN (OLD.id = `+strconv.FormatInt(poisoned, 10)+`) EXECUTE FUNCTION `+table+`_poison()`); err != nil {
		t.Fatal(err)
	}
	lost, err := b.Heartbeat(ctx, refs, time.Hour)
	var he *jobs.HeartbeatError
	if !errors.As(err, &he) || len(lost) != 0 {
		t.Fatalf("Heartbeat: lost %q, %v; want none lost and a *jobs.HeartbeatError", lost, err)
	}
	var want []string
	for _, j := range js[:20] { // the two leases of the failed statement
		want = append(want, j.ID)
	}
	if !slices.Equal(he.Unknown, want) {
		t.Fatalf("unknown %q, want %q", he.Unknown, want)
	}
	if _, err := pool.Exec(ctx, `DROP TRIGGER `+table+`_poison ON `+table+`_lease`); err != nil {
		t.Fatal(err)
	}
	ds := deadlineOf(t, a)
	for i, j := range js {
		if extended := time.Until(ds[j.ID]) > 50*time.Minute; extended != (i >= 20) {
			t.Fatalf("%s ends at %v", j.ID, ds[j.ID])
		}
	}
	heartbeat(t, b, refs, 2*time.Hour) // the unknown ones are located again, and adopted
	ds = deadlineOf(t, a)
	for _, j := range js {
		if time.Until(ds[j.ID]) < 2*time.Hour-time.Minute {
			t.Fatalf("%s ends at %v", j.ID, ds[j.ID])
		}
	}
	if got := leasesOf(t, pool, table, js); got[0] != poisoned {
		t.Fatalf("%s moved from lease %d to %d: want its lease adopted", js[0].ID, poisoned, got[0])
	}
	checkMembers(t, pool, table)
}

// Two heartbeats of one registry at once, whose replies are read in the
// other order than their statements committed: the first adopts the
// other registry's lease of A and Z; the second, before the first caches
// that lease, moves A (listed with B1, of another lease) into a new
// lease. Caching the adopted lease must not take A out of the new lease
// in the cache: else the registry counts B1 alone there, and once B1 is
// completed elsewhere (the server then counts A alone) its heartbeats of
// B1 extend that lease, reporting B1 extended and keeping A alive.
func TestAdoptionCachedAfterANewerMove(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1)
	pool, m, b, table := twoRegistries(t, "newer")
	ctx := t.Context()
	fj := trackN(t, m, "f", 2, time.Minute)   // one lease: A, Z
	gj := trackN(t, m, "g", 2, 2*time.Minute) // another (another lease duration): B1, B3
	a, z, b1 := fj[0].Ref(), fj[1].Ref(), gj[0].Ref()
	adopted, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	pgjobs.SetAfterAdopt(b, func() {
		once.Do(func() {
			close(adopted)
			<-release
		})
	})
	var wg sync.WaitGroup
	wg.Go(func() { heartbeat(t, b, []jobs.Ref{a, z}, time.Hour) })
	<-adopted
	heartbeat(t, b, []jobs.Ref{a, b1}, time.Hour) // moves A and B1 into a new lease
	if la, lb := leaseOf(t, pool, table, a.ID), leaseOf(t, pool, table, b1.ID); la != lb {
		t.Fatalf("A in lease %d, B1 in %d: the test needs them moved together", la, lb)
	}
	close(release)
	wg.Wait()
	if err := m.Done(ctx, b1); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, b, []jobs.Ref{b1}, 2*time.Hour, b1.ID)
	if d := time.Until(deadlineOf(t, m)[a.ID]); d > 90*time.Minute {
		t.Fatalf("A, not listed, was extended: ends in %v", d)
	}
	heartbeat(t, b, []jobs.Ref{a, z}, 3*time.Hour)
	for _, ref := range []jobs.Ref{a, z} {
		if d := time.Until(deadlineOf(t, m)[ref.ID]); d < 3*time.Hour-time.Minute {
			t.Fatalf("%s ends in %v", ref.ID, d)
		}
	}
	checkMembers(t, pool, table)
}

// The registry that made leases and one that adopted them, heartbeating
// the same jobs at once, never deadlock: both lock the lease rows in ID
// order. Each job is alone in its lease (a chunk of 1), and the lease
// rows' order in the table is the reverse of their IDs' (each updated
// once, from the last); the extending statement's UPDATE locked them in
// the order of its plan, a sequential scan's on the small analyzed table,
// while the adopting ones lock them in ID order: a deadlock in each of 6
// runs, in rounds 5 to 45.
func TestExtendAndAdoptOfTheSameLeasesAtOnce(t *testing.T) {
	pgjobs.SetHeartbeatChunk(t, 1)
	pool, a, b, table := twoRegistries(t, "extorder")
	ctx := t.Context()
	if err := a.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	// Both heartbeats send their statements once both have planned them.
	var both atomic.Pointer[sync.WaitGroup]
	for _, reg := range []*pgjobs.Registry{a, b} {
		pgjobs.SetAfterPlan(reg, func() {
			if w := both.Load(); w != nil {
				w.Done()
				w.Wait()
			}
		})
	}
	r := strings.NewReplacer("T_", table)
	const n = 25 // one extending statement
	for round := range 100 {
		if _, err := pool.Exec(ctx, r.Replace("TRUNCATE T_, T__lease")); err != nil {
			t.Fatal(err)
		}
		pgjobs.ForgetLeases(a)
		pgjobs.ForgetLeases(b)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("r%d-%02d", round, i)
		}
		refs := insertInNoLease(t, pool, table, ids)
		heartbeat(t, a, refs, time.Hour) // a lease each, in the order of their IDs
		heartbeat(t, b, refs, time.Hour) // adopts them
		if got := statementsOf(b); got.adopt == 0 || got.slow != 0 {
			t.Fatalf("round %d: statements %+v, want adopting ones and no moving one", round, got)
		}
		if _, err := pool.Exec(ctx, r.Replace(`DO $$DECLARE l bigint;
BEGIN
	FOR l IN SELECT id FROM T__lease ORDER BY id DESC LOOP
		UPDATE T__lease SET deadline = deadline WHERE id = l;
	END LOOP;
END$$`)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, r.Replace("ANALYZE T__lease")); err != nil { // as autovacuum would
			t.Fatal(err)
		}
		w := new(sync.WaitGroup)
		w.Add(2)
		both.Store(w)
		errs := heartbeatsAtOnce(ctx, refs, a, b)
		both.Store(nil)
		for _, err := range errs {
			if err != nil { // a deadlock: SQLSTATE 40P01
				t.Fatalf("round %d: %v", round, err)
			}
		}
		checkMembers(t, pool, table)
	}
}
