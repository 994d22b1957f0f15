package pgjobs_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
)

// A heartbeat statement whose transaction fails at its commit (a deferred
// constraint trigger here; a serialization failure at commit under
// default_transaction_isolation serializable) is rolled back after its
// rows came: its jobs are unknown, not extended. The pipeline counted
// the statement done from its rows, then read the commit's error at the
// Sync and blamed the statements after it: every job was reported
// extended, with a HeartbeatError of no job.
func TestHeartbeatStatementFailingAtCommitIsUnknown(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1)
	pool := newPool(t)
	r, table := newRegistry(t, pool, "commitfail")
	ctx := t.Context()
	js := trackN(t, r, "c", 10, time.Minute) // one lease
	refs := refsOf(js)
	heartbeat(t, r, refs, time.Minute) // extended whole
	if _, err := pool.Exec(ctx, `CREATE FUNCTION `+table+`_veto() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'vetoed at commit'; END $$;
CREATE CONSTRAINT TRIGGER `+table+`_veto AFTER UPDATE ON `+table+`_lease
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+table+`_veto()`); err != nil {
		t.Fatal(err)
	}
	lost, err := r.Heartbeat(ctx, refs, 2*time.Hour)
	if _, e := pool.Exec(ctx, `DROP TRIGGER `+table+`_veto ON `+table+`_lease`); e != nil {
		t.Fatal(e)
	}
	unknown := map[string]bool{}
	var he *jobs.HeartbeatError
	switch {
	case errors.As(err, &he):
		for _, id := range he.Unknown {
			unknown[id] = true
		}
	case err != nil: // every outcome unknown
		for _, j := range js {
			unknown[j.ID] = true
		}
	}
	ds := deadlineOf(t, r)
	for _, j := range js {
		if !unknown[j.ID] && !slices.Contains(lost, j.ID) && time.Until(ds[j.ID]) < time.Hour {
			t.Fatalf("%s reported extended (lost %q, %v), ends in %v", j.ID, lost, err, time.Until(ds[j.ID]))
		}
	}
	heartbeat(t, r, refs, 3*time.Hour) // and the next one extends them
	checkEndsAfter(t, r, js, 3*time.Hour-time.Minute)
	checkMembers(t, pool, table)
}

// After the server forgot the connection's prepared statements (DEALLOCATE
// ALL), one heartbeat fails, and the next prepares again every statement
// it needs, not only those of the heartbeat that failed: here the first
// extends a lease and adopts another, the next (a job of the first lease
// gone meanwhile) moves jobs. pgx kept naming the moving statement the
// server had forgotten, and the second heartbeat failed too.
func TestHeartbeatAfterTheServerForgetsItsStatementsOfEveryKind(t *testing.T) {
	pgjobs.SetTrackSlots(t, 1)
	pool := oneConnectionPool(t) // DEALLOCATE ALL on the heartbeats' connection
	a, table := newRegistry(t, pool, "forgetkinds")
	other := registryOf(t, newPool(t), table) // completes a job on another connection
	js := trackN(t, a, "a", 10, time.Minute)  // one lease
	refs := refsOf(js)
	heartbeat(t, a, refs, time.Hour)     // extends: prepared
	heartbeat(t, a, refs[:5], time.Hour) // locates and moves (a new lease of a-0…4): prepared
	heartbeat(t, a, refs, time.Hour)     // extends the new lease and adopts the old one: prepared
	if _, err := pool.Exec(t.Context(), "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Heartbeat(t.Context(), refs[:5], 2*time.Hour); err == nil {
		t.Fatal("Heartbeat with its statements forgotten by the server: no error")
	}
	if err := other.Done(t.Context(), js[0].Ref()); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, a, refs[:5], 3*time.Hour, js[0].ID)
	checkEndsAfter(t, a, js[1:5], 3*time.Hour-time.Minute)
	checkMembers(t, pool, table)
}

// oneConnectionPool returns a pool of one connection to the test server.
func oneConnectionPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg := newPool(t).Config()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A statement of a pipeline whose row cannot be read (a value the reader
// refuses) fails alone: it committed, and so did the statements after it,
// which are done. The pipeline took the reader's error for the
// connection's and reported every later statement failed: a ReclaimEach
// left each of their jobs reclaimed, unknown to the scan, for another ttl.
func TestUnreadableRowFailsItsStatementAlone(t *testing.T) {
	conn, err := newPool(t).Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	done, errs := pgjobs.PipelineWithUnreadableRow(t.Context(), conn.Conn(), []string{"SELECT 1", "SELECT 2", "SELECT 3"})
	if done[0] || errs[0] == nil {
		t.Errorf("the statement of the unreadable row: done %v, error %v", done[0], errs[0])
	}
	for i := 1; i < 3; i++ {
		if !done[i] || errs[i] != nil {
			t.Errorf("statement %d after it: done %v, error %v; want done", i, done[i], errs[i])
		}
	}
}
