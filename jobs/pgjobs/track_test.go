package pgjobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
)

// leaseOf returns the lease of job id (0: none).
func leaseOf(t *testing.T, pool *pgxpool.Pool, table, id string) int64 {
	t.Helper()
	var l *int64
	if err := pool.QueryRow(t.Context(), "SELECT lease FROM "+table+" WHERE id = $1", []byte(id)).Scan(&l); err != nil {
		t.Fatalf("lease of %s: %v", id, err)
	}
	if l == nil {
		return 0
	}
	return *l
}

// Tracked jobs are in leases at once: the first heartbeat after Track
// extends them whole (one statement per 25 leases) and moves no job, with
// Tracks at once from 8 goroutines; no lease has more than HeartbeatChunk
// members.
func TestTrackThenHeartbeatOnlyExtends(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "tracked")
	pgjobs.SetHeartbeatChunk(t, 10)
	const n = 200
	js := make([]jobs.Job, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				js[i], errs[i] = r.Track(t.Context(), jobs.Job{ID: fmt.Sprint("t-", i), Owner: "w"}, time.Minute)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var leases, most int
	if err := pool.QueryRow(t.Context(), "SELECT count(*), max(members) FROM "+table+"_lease").Scan(&leases, &most); err != nil {
		t.Fatal(err)
	}
	if most > 10 || leases < n/10 {
		t.Fatalf("%d jobs tracked into %d leases of at most %d members, want leases of at most 10", n, leases, most)
	}
	refs := refsOf(js)
	for i := range 2 {
		heartbeat(t, r, refs, time.Duration(2+i)*time.Hour)
		fast, slow := pgjobs.HeartbeatStatements(r)
		if want := int64((i + 1) * ((leases + 24) / 25)); fast != want || slow != 0 {
			t.Fatalf("heartbeat %d of %d tracked jobs in %d leases: %d extending and %d moving statements in all, want %d and 0", i+1, n, leases, fast, slow, want)
		}
		endAfter(t, r, time.Duration(1+i)*time.Hour)
	}
	checkMembers(t, pool, table)
}

// goTrack tracks a job id with r in a goroutine of its own; wait returns
// its outcome.
func goTrack(r *pgjobs.Registry, id string) (wait func() (jobs.Job, error)) {
	var j jobs.Job
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		j, err = r.Track(context.Background(), jobs.Job{ID: id, Owner: "w"}, time.Hour)
	}()
	return func() (jobs.Job, error) { <-done; return j, err }
}

// goHeartbeat heartbeats refs with r for lease in a goroutine of its own;
// wait returns its outcome.
func goHeartbeat(r *pgjobs.Registry, refs []jobs.Ref, lease time.Duration) (wait func() ([]string, error)) {
	var lost []string
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		lost, err = r.Heartbeat(context.Background(), refs, lease)
	}()
	return func() ([]string, error) { <-done; return lost, err }
}

// endAfter fails the test unless every job in flight ends at least d
// from now.
func endAfter(t *testing.T, r *pgjobs.Registry, d time.Duration) {
	t.Helper()
	for id, end := range deadlineOf(t, r) {
		if time.Until(end) < d {
			t.Fatalf("%s ends at %v", id, end)
		}
	}
}

// hold returns a hook that blocks its first call until release is called
// (at the end of t at the latest), and a channel closed when that call has
// come.
func hold(t *testing.T) (hook func(), arrived <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = sync.OnceFunc(func() { close(out) })
	t.Cleanup(release)
	return func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(in)
			<-out
		}
	}, in, release
}

// joined returns a registry (one open lease) and another of its table,
// with a and b tracked into one lease of the first.
func joined(t *testing.T, prefix string) (*pgxpool.Pool, *pgjobs.Registry, *pgjobs.Registry, string, jobs.Job, jobs.Job) {
	pgjobs.SetTrackSlots(t, 1)
	pool, r, other, table := twoRegistries(t, prefix)
	js := trackN(t, r, prefix, 2, time.Hour)
	if la, lb := leaseOf(t, pool, table, js[0].ID), leaseOf(t, pool, table, js[1].ID); la == 0 || la != lb {
		t.Fatalf("two jobs tracked into leases %d and %d, want one", la, lb)
	}
	return pool, r, other, table, js[0], js[1]
}

// A heartbeat does not extend whole a lease a Track is joining (its reply
// not read yet): a member that left meanwhile and the joined job make the
// count right, but not the members. The heartbeat moves the lease's jobs
// and finds the one gone.
func TestHeartbeatDuringJoin(t *testing.T) {
	pool, r, other, table, a, b := joined(t, "duringjoin")
	hook, arrived, release := hold(t)
	pgjobs.SetAfterTrack(r, func(err error) error { hook(); return err })
	track := goTrack(r, "duringjoin-c")
	<-arrived // c joined the lease on the server: 3 members
	if err := other.Done(t.Context(), a.Ref()); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, r, []jobs.Ref{a.Ref(), b.Ref()}, 2*time.Hour, a.ID)
	release()
	c, err := track()
	if err != nil {
		t.Fatal(err)
	}
	heartbeat(t, r, []jobs.Ref{b.Ref(), c.Ref()}, 2*time.Hour)
	endAfter(t, r, time.Hour+time.Minute)
	checkMembers(t, pool, table)
}

// A Track does not join a lease a heartbeat is extending (planned, its
// statement not answered): it makes a new lease, and the extension,
// whose count a member that left meanwhile changed, fails and moves the
// jobs; none is reported extended that is not.
func TestTrackDuringExtension(t *testing.T) {
	pool, r, other, table, a, b := joined(t, "duringext")
	hook, arrived, release := hold(t)
	pgjobs.SetAfterPlan(r, hook)
	beat := goHeartbeat(r, []jobs.Ref{a.Ref(), b.Ref()}, 2*time.Hour)
	<-arrived
	c, err := r.Track(t.Context(), jobs.Job{ID: "duringext-c", Owner: "w"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Done(t.Context(), a.Ref()); err != nil {
		t.Fatal(err)
	}
	release()
	lost, hbErr := beat()
	if hbErr != nil || !slices.Equal(lost, []string{a.ID}) {
		t.Fatalf("Heartbeat: lost %q, %v; want %q", lost, hbErr, a.ID)
	}
	if leaseOf(t, pool, table, c.ID) == leaseOf(t, pool, table, b.ID) {
		t.Fatalf("%s joined the lease a heartbeat was extending", c.ID)
	}
	ds := deadlineOf(t, r)
	if time.Until(ds[b.ID]) < time.Hour+time.Minute || time.Until(ds[c.ID]) > time.Hour {
		t.Fatalf("deadlines %v: want %s extended, %s as tracked", ds, b.ID, c.ID)
	}
	checkMembers(t, pool, table)
}

// A Track whose reply is lost (the job joined the lease, the caller got an
// error) leaves its lease out of the Registry's: no Track joins it again,
// and its other jobs move at the next heartbeat, so that a member that
// left it later is found gone.
func TestTrackReplyLost(t *testing.T) {
	pool, r, other, table, a, b := joined(t, "replylost")
	lostReply := errors.New("reply lost")
	var once sync.Once
	pgjobs.SetAfterTrack(r, func(err error) error {
		if err == nil {
			once.Do(func() { err = lostReply })
		}
		return err
	})
	if _, err := r.Track(t.Context(), jobs.Job{ID: "replylost-c", Owner: "w"}, time.Hour); !errors.Is(err, lostReply) {
		t.Fatalf("Track: %v, want the lost reply", err)
	}
	if leaseOf(t, pool, table, "replylost-c") != leaseOf(t, pool, table, a.ID) {
		t.Fatal("the job whose reply was lost did not join the lease")
	}
	d, err := r.Track(t.Context(), jobs.Job{ID: "replylost-d", Owner: "w"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf(t, pool, table, d.ID) == leaseOf(t, pool, table, a.ID) {
		t.Fatalf("%s joined the lease of a Track of unknown outcome", d.ID)
	}
	if err := other.Done(t.Context(), a.Ref()); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, r, []jobs.Ref{a.Ref(), b.Ref(), d.Ref()}, 2*time.Hour, a.ID)
	checkMembers(t, pool, table)
}

// A heartbeat that moves the jobs of a lease while a Track joins it (the
// join sent after the plan, answered before the moves) keeps the count
// exact; the joined job moves at the next heartbeat.
func TestMoveDuringJoin(t *testing.T) {
	pool, r, _, table, a, b := joined(t, "movejoin")
	trackHook, trackArrived, trackRelease := hold(t)
	pgjobs.SetBeforeTrack(r, trackHook)
	track := goTrack(r, "movejoin-c")
	<-trackArrived // c's join of the lease is pending
	planHook, planned, planRelease := hold(t)
	pgjobs.SetAfterPlan(r, planHook)
	beat := goHeartbeat(r, []jobs.Ref{a.Ref(), b.Ref()}, 2*time.Hour)
	<-planned // the plan moves a and b: their lease has a join pending
	trackRelease()
	c, err := track()
	if err != nil {
		t.Fatal(err)
	}
	planRelease()
	if lost, err := beat(); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat: lost %q, %v", lost, err)
	}
	if fast, slow := pgjobs.HeartbeatStatements(r); fast != 0 || slow != 1 {
		t.Fatalf("%d extending and %d moving statements, want 0 and 1", fast, slow)
	}
	checkMembers(t, pool, table)
	heartbeat(t, r, []jobs.Ref{a.Ref(), b.Ref(), c.Ref()}, 3*time.Hour)
	endAfter(t, r, 2*time.Hour+time.Minute)
	checkMembers(t, pool, table)
}

// A Track never joins a lease that is gone (its members all left through
// another registry) or that ended (its jobs are the recoverer's to take):
// it makes a new one; no job points to a missing lease, and the ended
// lease stays ended.
func TestJoinOfAnEndedLease(t *testing.T) {
	t.Run("gone", func(t *testing.T) {
		pool, r, other, table, a, b := joined(t, "gone")
		for _, j := range []jobs.Job{a, b} {
			if err := other.Done(t.Context(), j.Ref()); err != nil {
				t.Fatal(err)
			}
		}
		c, err := r.Track(t.Context(), jobs.Job{ID: "gone-c", Owner: "w"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if leaseOf(t, pool, table, c.ID) == 0 {
			t.Fatalf("%s is in no lease", c.ID)
		}
		checkMembers(t, pool, table)
		heartbeat(t, r, []jobs.Ref{c.Ref()}, 2*time.Hour)
		if fast, slow := pgjobs.HeartbeatStatements(r); fast != 1 || slow != 0 {
			t.Fatalf("%d extending and %d moving statements, want 1 and 0", fast, slow)
		}
	})
	t.Run("ended", func(t *testing.T) {
		pool, r, _, table, a, b := joined(t, "ended")
		if _, err := pool.Exec(t.Context(), "UPDATE "+table+"_lease SET deadline = now() - interval '1 second'"); err != nil {
			t.Fatal(err)
		}
		c, err := r.Track(t.Context(), jobs.Job{ID: "ended-c", Owner: "w"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if l := leaseOf(t, pool, table, c.ID); l == 0 || l == leaseOf(t, pool, table, a.ID) {
			t.Fatalf("%s in lease %d: want a new one", c.ID, l)
		}
		expired, err := r.Expired(t.Context(), 0)
		if err != nil || len(expired) != 2 {
			t.Fatalf("Expired after a Track: %d jobs, %v; want %s and %s", len(expired), err, a.ID, b.ID)
		}
		checkMembers(t, pool, table)
	})
	// Every open lease of the Registry ended on the server: a Track whose
	// join fails goes into a new lease at its next attempt, rather than
	// trying the next slot's ended lease (5 attempts, 8 slots).
	t.Run("every slot", func(t *testing.T) {
		pgjobs.SetTrackSlots(t, 8)
		pool := newPool(t)
		r, table := newRegistry(t, pool, "slots")
		trackN(t, r, "s", 8, time.Hour)
		if _, err := pool.Exec(t.Context(), "UPDATE "+table+"_lease SET deadline = now() - interval '1 second'"); err != nil {
			t.Fatal(err)
		}
		c, err := r.Track(t.Context(), jobs.Job{ID: "slots-c", Owner: "w"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if leaseOf(t, pool, table, c.ID) == 0 {
			t.Fatalf("%s is in no lease", c.ID)
		}
		checkMembers(t, pool, table)
	})
}

// A Track that replaces an entry in a lease leaves that lease and joins
// none (a statement locks one lease row at most); its first heartbeat
// moves it.
func TestTrackReplacingLeasedEntry(t *testing.T) {
	pool, r, _, table, a, b := joined(t, "replace")
	a2, err := r.Track(t.Context(), jobs.Job{ID: a.ID, Owner: "w"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if l := leaseOf(t, pool, table, a.ID); l != 0 {
		t.Fatalf("the replacing entry is in lease %d, want none", l)
	}
	checkMembers(t, pool, table)
	heartbeat(t, r, []jobs.Ref{a.Ref(), a2.Ref(), b.Ref()}, 2*time.Hour, a.ID)
	heartbeat(t, r, []jobs.Ref{a2.Ref(), b.Ref()}, 3*time.Hour)
	checkMembers(t, pool, table)
}

// A Track that finds the ID inserted meanwhile by another statement, in a
// lease (ON CONFLICT … WHERE: no row), writes nothing: the lease it would
// join keeps its count; it is sent again and replaces that entry.
func TestTrackFindingNoRowLeavesNoIncrement(t *testing.T) {
	pool, r, _, table, a, _ := joined(t, "norow")
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `WITH l AS (INSERT INTO `+table+`_lease (id, deadline, members)
	SELECT nextval('`+table+`_lease_id'), now() + interval '1 hour', 1 RETURNING id)
INSERT INTO `+table+` (id, payload, owner, attempt, epoch, deadline, lease)
	SELECT 'norow-x', '', 'other', 0, nextval('`+table+`_epoch'), now() + interval '1 hour', id FROM l`); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	track := goTrack(r, "norow-x")
	// The Track waits for the insert of the same ID to commit.
	for waiting := false; !waiting; {
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))", pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if !waiting {
			<-time.After(time.Millisecond)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := track()
	if err != nil {
		t.Fatal(err)
	}
	if x.Owner != "w" || leaseOf(t, pool, table, x.ID) != 0 {
		t.Fatalf("Track after the other insert: %+v in lease %d, want the entry replaced, in none", x, leaseOf(t, pool, table, x.ID))
	}
	checkMembers(t, pool, table)
	heartbeat(t, r, []jobs.Ref{a.Ref(), x.Ref()}, 2*time.Hour)
	checkMembers(t, pool, table)
}

// Tracks (of new IDs and of IDs in flight), heartbeats, completions and
// removals of one table at once, by two registries, never deadlock and
// keep every lease's count exact.
func TestTracksAtOnce(t *testing.T) {
	pgjobs.SetHeartbeatChunk(t, 5)
	pool, r, other, table := twoRegistries(t, "atonce")
	ctx := t.Context()
	const ids, rounds = 40, 30
	var mu sync.Mutex
	current := map[string]jobs.Ref{}
	refs := func() []jobs.Ref {
		mu.Lock()
		defer mu.Unlock()
		out := make([]jobs.Ref, 0, len(current))
		for _, ref := range current {
			out = append(out, ref)
		}
		return out
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range rounds * 3 {
				j, err := r.Track(ctx, jobs.Job{ID: fmt.Sprint("atonce-", (w*7+i*3)%ids), Owner: "w"}, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				current[j.ID] = j.Ref()
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for range rounds {
			if _, err := r.Heartbeat(ctx, refs(), time.Hour); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range rounds {
			for k, ref := range refs() {
				if k == 3 {
					break
				}
				var err error
				if (i+k)%3 == 0 {
					err = other.Remove(ctx, ref)
				} else {
					err = other.Done(ctx, ref)
				}
				if err != nil && !errors.Is(err, jobs.ErrStale) {
					t.Error(err)
					return
				}
			}
		}
	})
	wg.Wait()
	checkMembers(t, pool, table) // a job in a missing lease too
}
