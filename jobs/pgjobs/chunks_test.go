package pgjobs_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

// countUpdates makes the server record, in <table>_updates, how many rows
// each heartbeat statement (an UPDATE of table FROM unnest) that changed
// some changed: a statement-level trigger.
func countUpdates(t *testing.T, pool *pgxpool.Pool, table string) func() []int {
	t.Helper()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+`_updates (n int);
CREATE FUNCTION `+table+`_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF current_query() LIKE '%unnest%' AND EXISTS (SELECT FROM changed) THEN INSERT INTO `+table+`_updates SELECT count(*) FROM changed; END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER `+table+`_count AFTER UPDATE ON `+table+` REFERENCING NEW TABLE AS changed
FOR EACH STATEMENT EXECUTE FUNCTION `+table+`_count()`); err != nil {
		t.Fatal(err)
	}
	return func() []int {
		rows, _ := pool.Query(ctx, `DELETE FROM `+table+`_updates RETURNING n`)
		ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
}

// heartbeatsElsewhere is a registry whose heartbeats go through another
// Registry of its table, which tracked none of the jobs and adopts no
// lease (SetMovesOnly): each heartbeat moves its jobs into leases of that
// one, in statements of HeartbeatChunk jobs.
type heartbeatsElsewhere struct {
	*pgjobs.Registry
	other *pgjobs.Registry
}

func (h heartbeatsElsewhere) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	return h.other.Heartbeat(ctx, refs, lease)
}

// elsewhere returns a registry of table r whose heartbeats move the jobs.
func elsewhere(t *testing.T, pool *pgxpool.Pool, r *pgjobs.Registry, table string) heartbeatsElsewhere {
	other, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	pgjobs.SetMovesOnly(other)
	return heartbeatsElsewhere{r, other}
}

// heartbeatsInNoLease is a registry whose heartbeats first take every job
// of its table out of its lease (as the tables of an earlier version have
// them, each job's deadline its lease's), then go through another Registry
// of the table, which tracked none of them: the statements that locate the
// jobs move them into leases of that one, HeartbeatChunk jobs a statement.
type heartbeatsInNoLease struct {
	*pgjobs.Registry
	other *pgjobs.Registry
	pool  *pgxpool.Pool
	table string
}

func (h heartbeatsInNoLease) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	if _, err := h.pool.Exec(ctx, strings.NewReplacer("T_", h.table).Replace(`UPDATE T_ j SET lease = NULL, deadline = l.deadline
FROM T__lease l WHERE l.id = j.lease; DELETE FROM T__lease`)); err != nil {
		return nil, err
	}
	return h.other.Heartbeat(ctx, refs, lease)
}

// inNoLease returns a registry of table r whose heartbeats find the jobs
// in no lease.
func inNoLease(t *testing.T, pool *pgxpool.Pool, r *pgjobs.Registry, table string) heartbeatsInNoLease {
	return heartbeatsInNoLease{r, registryOf(t, pool, table), pool, table}
}

// A heartbeat of 3½ chunks that moves its jobs (a registry that did not
// track them) extends every job of its epoch and reports the stale ones at
// the chunk boundaries, as one statement did; it is 4 UPDATEs of at most
// HeartbeatChunk rows.
func TestHeartbeatInChunks(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "chunks")
	if err := r.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	updates := countUpdates(t, pool, table)
	chunk := pgjobs.HeartbeatChunk()
	registrytest.ChunkedHeartbeat(t, elsewhere(t, pool, r, table), chunk, 3)
	checkUpdates(t, updates(), chunk)
}

// checkUpdates fails the test unless got (countUpdates) is 4 statements
// of at most chunk rows.
func checkUpdates(t *testing.T, got []int, chunk int) {
	t.Helper()
	if len(got) != 4 {
		t.Fatalf("%d heartbeat statements for 3½ chunks, want 4 (rows: %v)", len(got), got)
	}
	for _, n := range got {
		if n > chunk {
			t.Fatalf("a heartbeat statement updated %d rows: the chunk is %d", n, chunk)
		}
	}
}

// The same, the jobs in no lease: the statements that locate them move
// them, 4 statements of at most HeartbeatChunk rows in one round trip.
func TestLocatingHeartbeatInChunks(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "locchunks")
	if err := r.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	updates := countUpdates(t, pool, table)
	chunk := pgjobs.HeartbeatChunk()
	h := inNoLease(t, pool, r, table)
	registrytest.ChunkedHeartbeat(t, h, chunk, 3)
	checkUpdates(t, updates(), chunk)
	if got, want := statementsOf(h.other), (statements{locate: 4}); got != want {
		t.Fatalf("statements %+v, want %+v", got, want)
	}
	checkMembers(t, pool, table)
}

// A heartbeat whose second statement fails on the server (a trigger
// raises an error for one of its rows, which it moves) reports that
// chunk's jobs as unknown, none as lost, and extends the others: the
// statement after it in the pipeline ran.
func TestHeartbeatChunkFails(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "poison")
	ctx := t.Context()
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	registrytest.FailedChunk(t, elsewhere(t, pool, r, table), pgjobs.HeartbeatChunk(), 3, 1, poisonUpdates(t, pool, table, "true"))
}

// poisonUpdates returns the poison of registrytest.FailedChunk: a trigger
// that fails every UPDATE of the job's row for which the SQL condition
// when (on OLD and NEW) holds, and its restore, which drops it.
func poisonUpdates(t *testing.T, pool *pgxpool.Pool, table, when string) func(id string) func() {
	ctx := t.Context()
	return func(id string) func() {
		if _, err := pool.Exec(ctx, `CREATE FUNCTION `+table+`_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'poisoned'; END $$;
CREATE TRIGGER `+table+`_poison BEFORE UPDATE ON `+table+` FOR EACH ROW
WHEN (OLD.id = '\x`+hexOf(id)+`'::bytea AND `+when+`) EXECUTE FUNCTION `+table+`_poison()`); err != nil {
			t.Fatal(err)
		}
		return func() {
			if _, err := pool.Exec(ctx, `DROP TRIGGER `+table+`_poison ON `+table); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The same, the jobs in no lease: the statement that fails is one that
// locates and moves them.
func TestLocatingHeartbeatChunkFails(t *testing.T) {
	pool := newPool(t)
	r, table := newRegistry(t, pool, "locpoison")
	ctx := t.Context()
	if err := r.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	h := inNoLease(t, pool, r, table)
	// Not the wrapper's own UPDATE, which takes the jobs out of their leases.
	registrytest.FailedChunk(t, h, pgjobs.HeartbeatChunk(), 3, 1, poisonUpdates(t, pool, table, "NEW.lease IS NOT NULL"))
	if got, want := statementsOf(h.other), (statements{locate: 3}); got != want {
		t.Fatalf("statements %+v, want %+v", got, want)
	}
	checkMembers(t, pool, table)
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for _, c := range []byte(s) {
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&15])
	}
	return b.String()
}

// pages records the page size ($1) of every listing statement.
type pages struct {
	mu    sync.Mutex
	sizes []int
}

func (p *pages) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "LIMIT $1") && len(d.Args) == 3 {
		if n, ok := d.Args[0].(int); ok {
			p.mu.Lock()
			p.sizes = append(p.sizes, n)
			p.mu.Unlock()
		}
	}
	return ctx
}
func (p *pages) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The listings (and Counts) read pages of ListChunk rows, each after the
// last row of the page before: with pages of 7 that end inside groups of jobs of one
// deadline, and at the real size, every expired job is found (and
// recovered by Scan) once; every listing statement asks for at most a
// page.
func TestListingPages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		page, n int
	}{{"pages-of-7", 7, 600}, {"real-size", pgjobs.ListChunk(), 2*pgjobs.ListChunk() + 3}} {
		t.Run(tc.name, func(t *testing.T) {
			pgjobs.SetListChunk(t, tc.page)
			pgjobs.SetCountChunk(t, tc.page)
			cfg, err := pgxpool.ParseConfig(testenv.Postgres(t).DSN())
			if err != nil {
				t.Fatal(err)
			}
			tr := &pages{}
			cfg.ConnConfig.Tracer = tr
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			r, _ := newRegistry(t, pool, "pages")
			registrytest.Pages(t, r, tc.n)
			tr.mu.Lock()
			defer tr.mu.Unlock()
			if len(tr.sizes) < 2*(tc.n/tc.page) {
				t.Fatalf("%d listing statements for listings of %d jobs in pages of %d", len(tr.sizes), tc.n, tc.page)
			}
			for _, n := range tr.sizes {
				if n < 1 || n > tc.page {
					t.Fatalf("a listing statement asked for %d rows: the page is %d", n, tc.page)
				}
			}
		})
	}
}

var _ jobs.Registry = (*pgjobs.Registry)(nil)

// The conformance suite passes with pages of 3 rows for the listings and
// the counts: every check of theirs crosses pages.
func TestConformanceInSmallPages(t *testing.T) {
	pgjobs.SetListChunk(t, 3)
	pgjobs.SetCountChunk(t, 3)
	pool := newPool(t)
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, _ := newRegistry(t, pool, "small")
		return r
	})
}
