package pgjobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
)

// takeOut takes the jobs of ids out of their leases (as an earlier
// version's tables have them), their deadlines their leases', and counts
// them out of their leases' members (deleting the leases left empty).
func takeOut(t *testing.T, pool *pgxpool.Pool, table string, ids ...string) {
	t.Helper()
	raw := make([][]byte, len(ids))
	for i, id := range ids {
		raw[i] = []byte(id)
	}
	if _, err := pool.Exec(t.Context(), strings.NewReplacer("T_", table).Replace(`
WITH o AS (SELECT j.id, j.lease, l.deadline FROM T_ j JOIN T__lease l ON l.id = j.lease WHERE j.id = ANY($1) FOR UPDATE),
	u AS (UPDATE T_ j SET lease = NULL, deadline = o.deadline FROM o WHERE j.id = o.id),
	g AS (SELECT lease, count(*) AS n FROM o GROUP BY lease)
UPDATE T__lease l SET members = l.members - g.n FROM g WHERE l.id = g.lease`), raw); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "DELETE FROM "+table+"_lease WHERE members = 0"); err != nil {
		t.Fatal(err)
	}
}

// insertInNoLease inserts jobs of ids in no lease, in that order (an
// earlier version's Track), and returns their refs in that order.
func insertInNoLease(t *testing.T, pool *pgxpool.Pool, table string, ids []string) []jobs.Ref {
	t.Helper()
	refs := make([]jobs.Ref, len(ids))
	for i, id := range ids {
		var epoch int64
		if err := pool.QueryRow(t.Context(), strings.NewReplacer("T_", table).Replace(`INSERT INTO T_ (id, payload, owner, attempt, epoch, deadline)
VALUES ($1, '', 'w', 0, nextval('T__epoch'), now() + interval '1 minute') RETURNING epoch`), []byte(id)).Scan(&epoch); err != nil {
			t.Fatal(err)
		}
		refs[i] = jobs.Ref{ID: id, Epoch: uint64(epoch)}
	}
	return refs
}

// heartbeatsAtOnce heartbeats refs for an hour through each of regs at
// once, and returns their errors.
func heartbeatsAtOnce(ctx context.Context, refs []jobs.Ref, regs ...*pgjobs.Registry) []error {
	errs := make([]error, len(regs))
	var wg sync.WaitGroup
	for i, reg := range regs {
		wg.Go(func() { _, errs[i] = reg.Heartbeat(ctx, refs, time.Hour) })
	}
	wg.Wait()
	return errs
}

// A heartbeat of jobs its registry did not track moves those in no lease
// into a new lease with the statement that locates them, in one round
// trip with the rest of that chunk (writing only their rows), adopts the
// lease whose every member it lists, moves the jobs of the lease it lists
// in part, and reports the job in no lease that is gone lost.
func TestLocatingStatementMovesJobsInNoLease(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1) // leases of 10 jobs in order
	pool, a, b, table := twoRegistries(t, "locmove")
	pgjobs.SetHeartbeatChunk(t, 10)
	if err := a.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	js := trackN(t, a, "a", 20, time.Minute) // a-0…9 in one lease, a-10…19 in another
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = js[i].ID
	}
	takeOut(t, pool, table, ids...) // a-0…4 in no lease, a-5…9 the whole of their lease
	if err := a.Done(t.Context(), js[4].Ref()); err != nil {
		t.Fatal(err)
	}
	checkMembers(t, pool, table)
	updates := countUpdates(t, pool, table)
	before := leasesOf(t, pool, table, js[5:])
	heartbeat(t, b, refsOf(js[:15]), time.Hour, js[4].ID)
	if got, want := statementsOf(b), (statements{locate: 2, adopt: 1, slow: 1}); got != want {
		t.Fatalf("statements %+v, want %+v", got, want)
	}
	if n := updates(); !slices.Equal(n, []int{4, 5}) {
		t.Fatalf("rows of jobs written by each statement: %v, want [4 5] (those in no lease, then those of the lease listed in part)", n)
	}
	after := leasesOf(t, pool, table, js[:4])
	if after[0] == 0 || slices.ContainsFunc(after, func(l int64) bool { return l != after[0] }) || slices.Contains(before, after[0]) {
		t.Fatalf("the jobs in no lease are in leases %v, want one new lease", after)
	}
	ds := deadlineOf(t, a)
	for i, j := range js {
		if i == 4 {
			continue
		}
		if extended := time.Until(ds[j.ID]) > 50*time.Minute; extended != (i < 15) {
			t.Fatalf("%s ends at %v (listed: %v)", j.ID, ds[j.ID], i < 15)
		}
	}
	checkMembers(t, pool, table)
	// The next heartbeat extends them all whole: its own two leases, the
	// adopted one.
	heartbeat(t, b, append(refsOf(js[:4]), refsOf(js[5:15])...), 2*time.Hour)
	if got, want := statementsOf(b), (statements{fast: 1, locate: 2, adopt: 2, slow: 1}); got != want {
		t.Fatalf("statements in all %+v, want %+v", got, want)
	}
	if n := updates(); len(n) != 0 {
		t.Fatalf("rows of jobs written since: %v, want none", n)
	}
}

// A job the locating statement reads in no lease, but that another moves
// into a lease before the statement has its lock, is not moved by it (its
// UPDATE looks at the row again once it has the lock): it moves with the
// moving statement of the next round trip, out of the other's lease, and
// every count stays exact.
func TestLocatingStatementSkipsAJobMovedMeanwhile(t *testing.T) {
	pool, a, b, table := twoRegistries(t, "locrace")
	ctx := t.Context()
	js := trackN(t, a, "a", 3, time.Minute)
	takeOut(t, pool, table, js[0].ID, js[1].ID, js[2].ID)
	r := strings.NewReplacer("T_", table)
	// Another moves a-1 into a lease of its own, in a transaction that
	// holds a-1's row lock until it commits.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var other int64
	if err := tx.QueryRow(ctx, r.Replace(`WITH l AS (INSERT INTO T__lease (id, deadline, members)
	VALUES (nextval('T__lease_id'), now() + interval '1 minute', 1) RETURNING id)
UPDATE T_ SET lease = (SELECT id FROM l) WHERE id = $1 RETURNING lease`), []byte(js[1].ID)).Scan(&other); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		heartbeat(t, b, refsOf(js), time.Hour)
	}()
	waitForLock(t, pool, table)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if got, want := statementsOf(b), (statements{locate: 1, slow: 1}); got != want {
		t.Fatalf("statements %+v, want %+v (a-1 moved by the moving statement)", got, want)
	}
	ls := leasesOf(t, pool, table, js)
	if ls[0] != ls[2] || ls[1] == ls[0] || ls[1] == other || ls[1] == 0 {
		t.Fatalf("leases %v: want a-0 and a-2 in one, a-1 in a new one (not %d)", ls, other)
	}
	checkEndsAfter(t, a, js, 50*time.Minute)
	checkMembers(t, pool, table)
}

// checkEndsAfter fails the test unless every job of js ends in more than
// d.
func checkEndsAfter(t *testing.T, r *pgjobs.Registry, js []jobs.Job, d time.Duration) {
	t.Helper()
	ds := deadlineOf(t, r)
	for _, j := range js {
		if time.Until(ds[j.ID]) < d {
			t.Fatalf("%s ends at %v, want after %v from now", j.ID, ds[j.ID], d)
		}
	}
}

// waitForLock waits until a statement that names table waits for a lock.
func waitForLock(t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, table).Scan(&n); err != nil {
			t.Fatalf("waiting for a statement to wait for a lock: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no statement waits for the lock")
		case <-time.After(time.Millisecond):
		}
	}
}

// A heartbeat's statements are prepared on their connection when its
// configuration caches statements (pgx's default), and executed as such
// (pg_prepared_statements counts their plans), and sent unnamed otherwise;
// either way they extend every job, past the five executions after which
// PostgreSQL keeps a generic plan, each heartbeat moving a job in no lease
// with the locating statement.
func TestHeartbeatStatementsArePrepared(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := newPool(t).Config()
			cfg.MaxConns = 1 // the heartbeat's connection is the one asked after
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			a, table := newRegistry(t, pool, "prepared")
			b := registryOf(t, pool, table)
			js := trackN(t, a, "a", 12, time.Minute)
			for i := range 8 {
				takeOut(t, pool, table, js[i].ID)
				heartbeat(t, b, refsOf(js), time.Hour)
				pgjobs.ForgetLeases(b)
			}
			var plans int
			if err := pool.QueryRow(t.Context(), `SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements
				WHERE name LIKE 'leasehold_pgjobs_%'`).Scan(&plans); err != nil {
				t.Fatal(err)
			}
			if prepared := mode == pgx.QueryExecModeCacheStatement; prepared != (plans >= 16) || !prepared && plans != 0 {
				t.Fatalf("heartbeat statements executed prepared: %d (want at least 16: %v)", plans, prepared)
			}
			checkEndsAfter(t, a, js, 50*time.Minute)
			checkMembers(t, pool, table)
		})
	}
}

// A locating heartbeat and a moving one (another Registry's, SetMovesOnly)
// of the same jobs in no lease at once never deadlock: both lock the job
// rows in ID order. The locating statement's UPDATE locked them in the
// order of its plan, which on a small analyzed table is a sequential
// scan's, the table's order (here the reverse of the IDs'): a deadlock in
// about two rounds of five.
func TestLocateAndMoveOfTheSameJobsAtOnce(t *testing.T) {
	pool, a, b, table := twoRegistries(t, "lockorder")
	ctx := t.Context()
	if err := a.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	pgjobs.SetMovesOnly(b)
	r := strings.NewReplacer("T_", table)
	for round := range 25 {
		if _, err := pool.Exec(ctx, r.Replace("TRUNCATE T_, T__lease")); err != nil {
			t.Fatal(err)
		}
		pgjobs.ForgetLeases(a)
		pgjobs.ForgetLeases(b)
		ids := make([]string, 40)
		for i := range ids {
			ids[len(ids)-1-i] = fmt.Sprintf("r%d-%02d", round, i)
		}
		refs := insertInNoLease(t, pool, table, ids) // the table's order the reverse of the IDs'
		slices.Reverse(refs)
		if _, err := pool.Exec(ctx, "ANALYZE "+table); err != nil { // as autovacuum would
			t.Fatal(err)
		}
		for _, err := range heartbeatsAtOnce(ctx, refs, a, b) {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		checkMembers(t, pool, table)
	}
}

// A heartbeat after the server forgot the connection's prepared statements
// (DEALLOCATE ALL, as a session reset does) fails those statements' jobs
// as unknown, and makes pgx forget them too: the next heartbeat prepares
// them again. Every heartbeat after the first failed, for the life of the
// connection.
func TestHeartbeatAfterTheServerForgetsItsStatements(t *testing.T) {
	pool := oneConnectionPool(t) // DEALLOCATE ALL on the heartbeats' connection
	a, table := newRegistry(t, pool, "forgotten")
	b := registryOf(t, pool, table)
	js := trackN(t, a, "a", 12, time.Minute)
	refs := refsOf(js)
	heartbeat(t, b, refs, time.Hour)
	if _, err := pool.Exec(t.Context(), "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Heartbeat(t.Context(), refs, 2*time.Hour); err == nil {
		t.Fatal("Heartbeat with its statements forgotten by the server: no error")
	}
	heartbeat(t, b, refs, 3*time.Hour)
	checkEndsAfter(t, a, js, 3*time.Hour-time.Minute)
	checkMembers(t, pool, table)
}
