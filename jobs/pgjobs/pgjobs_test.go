package pgjobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newPool(t testing.TB) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), testenv.Postgres(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var tables atomic.Int64

func TestConformance(t *testing.T) {
	pool := newPool(t)
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, err := pgjobs.New(pool, fmt.Sprintf("test_jobs_%d", tables.Add(1)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}

// The registry does not depend on the session's output settings: a role
// or database may set DateStyle, bytea_output, IntervalStyle or TimeZone
// otherwise. A reclaim that read its job in the text format (a pipeline's
// statement) failed under DateStyle 'SQL, DMY' and bytea_output 'escape'
// after it had committed: the scan then reclaimed the job again at each
// pass (Attempt+1) and never requeued it.
func TestConformanceUnderOtherSessionSettings(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"DateStyle": "SQL, DMY", "bytea_output": "escape",
		"IntervalStyle": "postgres_verbose", "TimeZone": "Pacific/Chatham"} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var style string
	if err := pool.QueryRow(t.Context(), "SHOW DateStyle").Scan(&style); err != nil || style != "SQL, DMY" {
		t.Fatalf("DateStyle %q, %v", style, err)
	}
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, err := pgjobs.New(pool, fmt.Sprintf("test_jobs_%d", tables.Add(1)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}

// A history column written by something else (an operator, an older
// version) never fails a listing: the entries that parse are read, the
// others skipped. One such row used to fail Expired, and with it every
// recovery scan.
func TestCorruptHistoryIsTolerated(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "corrupt")
	ctx := t.Context()
	for i, h := range []string{`{"not": "an array"}`, `[1, "x", {"at": "2023-11-14T22:13:20Z", "from": "old", "by": "new", "attempt": 1}, {"at": 5}]`, `"text"`, `null`} {
		id := fmt.Sprintf("j%d", i)
		if _, err := r.Track(ctx, jobs.Job{ID: id, Owner: "w"}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "UPDATE "+table+" SET history = $1::jsonb WHERE id = $2", h, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	var expired []jobs.Job
	var err error
	for len(expired) < 4 {
		if expired, err = r.Expired(ctx, 10); err != nil {
			t.Fatalf("Expired over corrupt histories: %v", err)
		}
		<-time.After(5 * time.Millisecond)
	}
	for _, j := range expired {
		want := 0
		if j.ID == "j1" {
			want = 1
		}
		if len(j.History) != want {
			t.Fatalf("%s: history %+v, want %d entries", j.ID, j.History, want)
		}
		if want == 1 && (j.History[0].From != "old" || j.History[0].At.Unix() != 1700000000) {
			t.Fatalf("%s: history %+v", j.ID, j.History)
		}
		c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
		if err != nil {
			t.Fatalf("Reclaim(%s): %v", j.ID, err)
		}
		if err := r.Done(ctx, c.Ref()); err != nil {
			t.Fatal(err)
		}
	}
}

// Tables made by an earlier version (id text) are converted by Setup, and
// their rows keep working.
func TestSetupConvertsTextIDs(t *testing.T) {
	pool := newPool(t)
	table := fmt.Sprintf("test_jobs_old_%d", tables.Add(1))
	ctx := t.Context()
	old := strings.NewReplacer("T_", table).Replace(`
CREATE SEQUENCE T__epoch;
CREATE TABLE T_ (id text PRIMARY KEY, payload bytea NOT NULL, owner text NOT NULL, attempt int NOT NULL,
	epoch bigint NOT NULL, deadline timestamptz NOT NULL, history jsonb NOT NULL DEFAULT '[]');
CREATE INDEX T__deadline ON T_ (deadline);
CREATE TABLE T__dead (id text PRIMARY KEY, payload bytea NOT NULL, owner text NOT NULL, attempt int NOT NULL,
	epoch bigint NOT NULL, deadline timestamptz NOT NULL, history jsonb NOT NULL, died timestamptz NOT NULL, reason text NOT NULL);
CREATE INDEX T__dead_died ON T__dead (died);
INSERT INTO T_ VALUES ('jöb', 'p', 'w', 0, nextval('T__epoch'), now() + interval '1 hour', '[]');`)
	if _, err := pool.Exec(ctx, old); err != nil {
		t.Fatal(err)
	}
	r, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	in, err := r.InFlight(ctx, 0)
	if err != nil || len(in) != 1 || in[0].ID != "jöb" || in[0].Owner != "w" {
		t.Fatalf("InFlight of an old table = %+v, %v", in, err)
	}
	// The row keeps its payload (InFlight, an operator listing, shows
	// none: DeadJob does).
	if err := r.Bury(ctx, in[0].Ref(), "test"); err != nil {
		t.Fatal(err)
	}
	if d, err := r.DeadJob(ctx, "jöb"); err != nil || string(d.Payload) != "p" {
		t.Fatalf("DeadJob of a converted row = %+v, %v", d, err)
	}
	if err := r.Purge(ctx, "jöb"); err != nil {
		t.Fatal(err)
	}
	j, err := r.Track(ctx, jobs.Job{ID: "nul\x00", Owner: "w"}, time.Minute)
	if err != nil {
		t.Fatalf("Track of an ID with a NUL after the conversion: %v", err)
	}
	if err := r.Done(ctx, j.Ref()); err != nil {
		t.Fatal(err)
	}
	// Setup added the max_retries columns and the retry records' table.
	c := registrytest.Requeued(t, r, "m", 5)
	if j, err := r.Track(ctx, jobs.Job{ID: "m", Owner: "w"}, time.Minute); err != nil || j.Attempt != 1 || j.MaxRetries != 5 {
		t.Fatalf("Track after a requeue on an upgraded table: %+v, %v (reclaimed %+v)", j, err, c)
	}
}

// A retry record older than jobs.RetryWindow is not taken over (the job
// starts again), and records older than it are deleted by later Remove
// calls, a few at a time: the table does not grow with the history.
func TestOldRetryRecordsAreIgnoredAndDropped(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "retry")
	ctx := t.Context()
	registrytest.Requeued(t, r, "late", 3)
	if _, err := pool.Exec(ctx, "UPDATE "+table+"_retry SET at = at - $1::bigint * interval '1 millisecond' - interval '1 second'",
		jobs.RetryWindow.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	if j, err := r.Track(ctx, jobs.Job{ID: "late", Owner: "w"}, time.Minute); err != nil || j.Attempt != 0 || j.MaxRetries != 0 || len(j.History) != 0 {
		t.Fatalf("Track after the retry window: %+v, %v; want a new job", j, err)
	}
	const old = 40
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+"_retry (id, attempt, max_retries, history, at) SELECT convert_to('old' || g, 'UTF8'), 1, 0, '[]', now() - $2::bigint * interval '1 millisecond' - interval '1 hour' FROM generate_series(1, $1) g", old, jobs.RetryWindow.Milliseconds()); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		registrytest.Requeued(t, r, fmt.Sprint(i), 0)
	}
	var left, recent int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE at < now() - interval '1 hour'), count(*) FILTER (WHERE at >= now() - interval '1 hour') FROM "+table+"_retry").Scan(&left, &recent); err != nil {
		t.Fatal(err)
	}
	if left != 0 || recent != 4 {
		t.Fatalf("after 4 Remove calls: %d of %d expired retry records left, %d recent ones; want 0 and 4", left, old, recent)
	}
}

// Completion markers older than jobs.DoneWindow are deleted by later Done
// calls, a few at a time: the markers table does not grow with the
// history. A recent marker still answers a retried Done.
func TestOldCompletionMarkersAreDropped(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "markers")
	ctx := t.Context()
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	const old = 40
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+"_done (epoch, id, at) SELECT -g, 'old', now() - interval '1 hour' FROM generate_series(1, $1) g", old); err != nil {
		t.Fatal(err)
	}
	var refs []jobs.Ref
	for i := range 4 {
		j, err := r.Track(ctx, jobs.Job{ID: fmt.Sprint(i), Owner: "w"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Done(ctx, j.Ref()); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, j.Ref())
	}
	var left, recent int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE id = 'old'), count(*) FILTER (WHERE id <> 'old') FROM "+table+"_done").Scan(&left, &recent); err != nil {
		t.Fatal(err)
	}
	if left != 0 || recent != 4 {
		t.Fatalf("after 4 Done calls: %d of %d expired markers left, %d recent ones; want 0 and 4", left, old, recent)
	}
	for _, ref := range refs {
		if err := r.Done(ctx, ref); err != nil {
			t.Fatalf("retried Done: %v", err)
		}
	}
}

// newRegistry returns a registry in a table of its own, and the table.
func newRegistry(t testing.TB, pool *pgxpool.Pool, prefix string) (*pgjobs.Registry, string) {
	table := fmt.Sprintf("test_jobs_%s_%d", prefix, tables.Add(1))
	r, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	return r, table
}

// Setup of tables that are up to date alters nothing: it must not wait for
// an ACCESS EXCLUSIVE lock (an ALTER TABLE, even one that IF NOT EXISTS
// makes a no-op) behind a transaction that reads the jobs, as every
// process's first operation runs Setup.
func TestSetupOfCurrentTablesTakesNoExclusiveLock(t *testing.T) {
	setupWhile(t, "locks", func(table string) []string {
		return []string{"SELECT count(*) FROM " + table, "SELECT count(*) FROM " + table + "_dead"} // ACCESS SHARE
	})
}

// setupWhile sets up a new registry's tables, then sets them up again
// through another Registry (a process that starts) while a transaction
// holds the locks of the statements stmts(table) returns: that Setup must
// not wait for them (5 s).
func setupWhile(t *testing.T, prefix string, stmts func(table string) []string) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, prefix)
	ctx := t.Context()
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, stmt := range stmts(table) {
		if _, err := tx.Exec(ctx, stmt); err != nil { // its locks held until the rollback
			t.Fatal(err)
		}
	}
	again, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := again.Setup(sctx); err != nil {
		t.Fatalf("Setup while a transaction holds the locks of %q: %v", stmts(table), err)
	}
}

// Done and Bury drop a retry record of their job's ID (one a Remove that
// raced a Track may leave beside the entry).
func TestDoneAndBuryDropRetryRecords(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "drop")
	registrytest.DoneAndBuryDropRetryRecords(t, r, func(id string) {
		if _, err := pool.Exec(t.Context(), "INSERT INTO "+table+"_retry (id, attempt, max_retries, history, at) VALUES ($1, 3, 2, '[]', now())", []byte(id)); err != nil {
			t.Fatal(err)
		}
	})
}

// Setup of tables in their current form locks none of them: a process
// that starts waits for no other's writes. Its DDL (CREATE INDEX IF NOT
// EXISTS) took a share lock on each table in turn, in one transaction,
// which waited for the writers and deadlocked with them (a Done that had
// written the jobs table and waited for the leases').
func TestSetupOfCurrentTablesWaitsForNoWriter(t *testing.T) {
	setupWhile(t, "writers", func(table string) []string {
		var stmts []string
		for _, tb := range []string{table, table + "_lease", table + "_dead", table + "_done", table + "_retry"} {
			stmts = append(stmts, "DELETE FROM "+tb+" WHERE false") // ROW EXCLUSIVE
		}
		return stmts
	})
}

// The conformance suite passes on a pool that prepares no statement
// (pgx.QueryExecModeExec and QueryExecModeSimpleProtocol, the modes for a
// connection pooler in transaction mode), and through such a pooler
// (PgBouncer, pool_mode=transaction): every argument's Go type must name
// its PostgreSQL type, and each statement must be a transaction of its
// own. Track failed on every such pool (its history, bytes, was sent as
// bytea).
func TestConformanceWithoutPreparedStatements(t *testing.T) {
	for _, c := range []struct {
		name string
		mode pgx.QueryExecMode
		dsn  func(t *testing.T) string
	}{
		{"exec", pgx.QueryExecModeExec, nil},
		{"simple_protocol", pgx.QueryExecModeSimpleProtocol, nil},
		{"pgbouncer_transaction_mode", pgx.QueryExecModeExec, func(t *testing.T) string {
			return testenv.NewPgBouncer(t, testenv.Postgres(t), "transaction").DSN()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := testenv.Postgres(t).DSN()
			if c.dsn != nil {
				dsn = c.dsn(t)
			}
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DefaultQueryExecMode = c.mode
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			registrytest.Run(t, func(t testing.TB) jobs.Registry {
				r, _ := newRegistry(t, pool, "exec")
				return r
			})
		})
	}
}
