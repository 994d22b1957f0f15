// Package pgjobs is the PostgreSQL jobs.Registry: two tables and a
// sequence, which Setup creates (or the first operation, when the role may
// create tables):
//
//	<table>        in-flight jobs; a b-tree index on deadline is the expiry index
//	<table>_dead   the dead set, indexed by time of death
//	<table>_done   completion markers (epoch, id, time), indexed by time
//	<table>_retry  retry records of requeued jobs (id, attempt, max_retries,
//	               history, time), indexed by time
//	<table>_epoch  the epoch sequence
//
// Job IDs are bytea: an ID is opaque bytes (NUL and invalid UTF-8
// included), which text cannot hold. Setup converts the id column of
// tables made by earlier versions (text) in place, once, and adds what
// they lack (<table>_done, <table>_retry, the max_retries columns, with
// ALTER TABLE … ADD COLUMN IF NOT EXISTS, run only when the column is
// missing): after an upgrade, run Setup once with a role that owns the
// tables when the application's role does not (its operations fail until
// then).
//
// Remove (after a requeue) leaves the job's retry record, which the next
// Track of its ID takes over (jobs.Registry); each Remove also deletes up
// to a few records older than jobs.RetryWindow, as Done does markers: the
// records stay about as many as the jobs requeued in one window and not
// taken back.
//
// Done is idempotent per epoch: it records the completion in <table>_done,
// and a Done that finds its epoch's marker there returns nil. Each Done
// also deletes up to a few markers older than jobs.DoneWindow (oldest
// first, skipping rows another Done is deleting): the markers stay about
// as many as the completions of one window, and no statement walks them.
//
// Every operation is statements on the server's clock (now()), in one
// round trip but for listings longer than a page. Expired is an index
// range scan, ORDER BY deadline, id LIMIT n: its cost grows with the
// number expired, not the number tracked. The operator listings (InFlight,
// Dead) select every column but the payload, which never leaves the
// server for them.
//
// # Bounds
//
// No statement that writes holds row locks over a set larger than a
// chunk, so that none holds them for more than about a couple of
// milliseconds (measured: bench BenchmarkJobsScale):
//
//   - Track, Done, Remove, Reclaim, Bury, Purge, DeadJob: one job each
//     (Done and Remove also delete at most 16 expired markers or records).
//   - Heartbeat: one UPDATE … FROM unnest($ids, $epochs) per 200 jobs, each
//     its own transaction (a pipeline with a Sync after each statement) on
//     one connection: one round trip of wall time plus the server's work
//     (100,000 jobs are 500 statements). A failed statement fails its chunk
//     alone (jobs.HeartbeatError). One connection, not several: concurrent
//     heartbeat statements contend for the deadline index's last page and
//     took twice as long (measured at 10,000,000 jobs).
//   - Expired, InFlight, Dead: one SELECT per page of 1,000 rows, each
//     after the last (deadline or time of death, id) of the page before, one
//     round trip per page: a scan of 100 expired jobs is one. A page reads
//     past its limit the rows that share its last deadline (an incremental
//     sort of the deadline index): a heartbeat statement's rows share one,
//     so at most 200 more. Rows that move between two pages (a heartbeat, a
//     completion) may be listed twice — the registry drops the second — or
//     not at all: the next scan sees them.
//   - Counts reads the tables in pages of 5,000 rows in ID order, one
//     SELECT each (it locks no row): its round trips grow with the jobs
//     (2,000 at 10,000,000), no statement's work does. It is the
//     operator's view; the Runner never calls it.
//
// The registry is as durable as the database: use a primary with
// synchronous_commit on (the default) for it.
package pgjobs

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Registry is a jobs.Registry and jobs.Inspector on PostgreSQL.
type Registry struct {
	pool  *pgxpool.Pool
	table string
	q     queries

	setupMu sync.Mutex
	ready   bool
}

var (
	_ jobs.Registry  = (*Registry)(nil)
	_ jobs.Inspector = (*Registry)(nil)
)

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,50}$`)

// New returns the registry stored in table ("" for "leasehold_jobs") of
// pool's database.
func New(pool *pgxpool.Pool, table string) (*Registry, error) {
	if pool == nil {
		return nil, backendkit.Invalid("pgjobs", "nil pool")
	}
	if table == "" {
		table = "leasehold_jobs"
	}
	if !identifier.MatchString(table) {
		return nil, backendkit.Invalid("pgjobs", "table name %q must match %s", table, identifier)
	}
	return &Registry{pool: pool, table: table, q: newQueries(table)}, nil
}

type queries struct {
	setup, track, done, heartbeat, remove, expired, inflight, reclaim, bury, dead, deadJob, purge, countJobs, countDead string
}

const (
	cols = `id, payload, owner, attempt, epoch, deadline, history, max_retries`
	// listed are the columns of the operator listings (InFlight, Dead):
	// all but the payload, which stays on the server.
	listed = `id, owner, attempt, epoch, deadline, history, max_retries`
)

func newQueries(t string) queries {
	r := strings.NewReplacer("T_", t)
	return queries{
		setup: r.Replace(`
CREATE SEQUENCE IF NOT EXISTS T__epoch;
CREATE TABLE IF NOT EXISTS T_ (
	id       bytea PRIMARY KEY,
	payload  bytea NOT NULL,
	owner    text NOT NULL,
	attempt  int NOT NULL,
	epoch    bigint NOT NULL,
	deadline timestamptz NOT NULL,
	history  jsonb NOT NULL DEFAULT '[]',
	max_retries int NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS T__deadline ON T_ (deadline);
CREATE TABLE IF NOT EXISTS T__dead (
	id       bytea PRIMARY KEY,
	payload  bytea NOT NULL,
	owner    text NOT NULL,
	attempt  int NOT NULL,
	epoch    bigint NOT NULL,
	deadline timestamptz NOT NULL,
	history  jsonb NOT NULL,
	died     timestamptz NOT NULL,
	reason   text NOT NULL,
	max_retries int NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS T__dead_died ON T__dead (died);
CREATE TABLE IF NOT EXISTS T__done (
	epoch bigint PRIMARY KEY,
	id    bytea NOT NULL,
	at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS T__done_at ON T__done (at);
CREATE TABLE IF NOT EXISTS T__retry (
	id          bytea PRIMARY KEY,
	attempt     int NOT NULL,
	max_retries int NOT NULL,
	history     jsonb NOT NULL,
	at          timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS T__retry_at ON T__retry (at);
DO $migrate$
BEGIN
	-- Tables of earlier versions: an ALTER only when the column is missing
	-- (it locks the table even when IF NOT EXISTS makes it a no-op).
	IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'T_'::regclass AND attname = 'max_retries' AND NOT attisdropped) THEN
		ALTER TABLE T_ ADD COLUMN IF NOT EXISTS max_retries int NOT NULL DEFAULT 0;
	END IF;
	IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'T__dead'::regclass AND attname = 'max_retries' AND NOT attisdropped) THEN
		ALTER TABLE T__dead ADD COLUMN IF NOT EXISTS max_retries int NOT NULL DEFAULT 0;
	END IF;
	IF (SELECT atttypid FROM pg_attribute WHERE attrelid = 'T_'::regclass AND attname = 'id') = 'text'::regtype THEN
		ALTER TABLE T_ ALTER COLUMN id TYPE bytea USING convert_to(id, 'UTF8');
	END IF;
	IF (SELECT atttypid FROM pg_attribute WHERE attrelid = 'T__dead'::regclass AND attname = 'id') = 'text'::regtype THEN
		ALTER TABLE T__dead ALTER COLUMN id TYPE bytea USING convert_to(id, 'UTF8');
	END IF;
END
$migrate$;`),
		done: r.Replace(`WITH d AS (DELETE FROM T_ WHERE id = $1 AND epoch = $2 RETURNING id, epoch),
	r AS (DELETE FROM T__retry WHERE id IN (SELECT id FROM d)),
	m AS (INSERT INTO T__done (epoch, id, at) SELECT epoch, id, now() FROM d ON CONFLICT (epoch) DO NOTHING),
	gc AS (DELETE FROM T__done WHERE epoch IN (SELECT epoch FROM T__done
		WHERE at < now() - $3::bigint * interval '1 millisecond' ORDER BY at LIMIT 16 FOR UPDATE SKIP LOCKED))
SELECT EXISTS (SELECT FROM d) OR EXISTS (SELECT FROM T__done WHERE epoch = $2 AND id = $1)`),
		// track takes over the count of the ID's retry record (r, deleted:
		// consumed; p if still within the window) or of the entry it
		// replaces (ON CONFLICT, j): attempt and history unless the
		// caller's attempt is higher, max retries unless the caller's is
		// not 0.
		track: r.Replace(`WITH r AS (DELETE FROM T__retry WHERE id = $1
		RETURNING attempt, max_retries, history, at > now() - $8::bigint * interval '1 millisecond' AS fresh),
	p AS (SELECT attempt, max_retries, history FROM r WHERE fresh)
INSERT INTO T_ AS j (` + cols + `)
SELECT $1, $2, $3, CASE WHEN p.attempt >= $4::int THEN p.attempt ELSE $4::int END,
	nextval('T__epoch'), now() + $5::bigint * interval '1 millisecond',
	CASE WHEN p.attempt >= $4::int THEN p.history ELSE $6::jsonb END,
	CASE WHEN $7::int = 0 THEN coalesce(p.max_retries, 0) ELSE $7::int END
FROM (SELECT) AS one LEFT JOIN p ON true
ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, owner = excluded.owner,
	attempt = greatest(j.attempt, excluded.attempt),
	history = CASE WHEN j.attempt >= excluded.attempt THEN j.history ELSE excluded.history END,
	max_retries = CASE WHEN $7::int = 0 THEN j.max_retries ELSE $7::int END,
	epoch = excluded.epoch, deadline = excluded.deadline
RETURNING epoch, deadline, attempt, max_retries, history`),
		// heartbeat returns the IDs it did not extend (lost).
		heartbeat: r.Replace(`WITH r AS (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS r(id, epoch)),
	u AS (UPDATE T_ AS j SET deadline = now() + $3::bigint * interval '1 millisecond'
		FROM r WHERE j.id = r.id AND j.epoch = r.epoch RETURNING j.id)
SELECT r.id FROM r WHERE NOT EXISTS (SELECT FROM u WHERE u.id = r.id)`),
		remove: r.Replace(`WITH d AS (DELETE FROM T_ WHERE id = $1 AND epoch = $2 RETURNING id, attempt, max_retries, history),
	m AS (INSERT INTO T__retry (id, attempt, max_retries, history, at) SELECT id, attempt, max_retries, history, now() FROM d
		ON CONFLICT (id) DO UPDATE SET attempt = excluded.attempt, max_retries = excluded.max_retries,
			history = excluded.history, at = excluded.at),
	gc AS (DELETE FROM T__retry WHERE id <> $1 AND id IN (SELECT id FROM T__retry
		WHERE at < now() - $3::bigint * interval '1 millisecond' ORDER BY at LIMIT 16 FOR UPDATE SKIP LOCKED))
SELECT count(*) FROM d`),
		// The listings read pages of $1 rows after a cursor ($2, $3): the
		// last row's deadline (or time of death) and ID.
		expired: r.Replace(`SELECT ` + cols + ` FROM T_ WHERE deadline <= now() AND deadline >= $2 AND (deadline > $2 OR id > $3)
ORDER BY deadline, id LIMIT $1`),
		inflight: r.Replace(`SELECT ` + listed + ` FROM T_ WHERE deadline >= $2 AND (deadline > $2 OR id > $3)
ORDER BY deadline, id LIMIT $1`),
		reclaim: r.Replace(`UPDATE T_ SET epoch = nextval('T__epoch'), attempt = attempt + 1, owner = $3,
	deadline = now() + $4::bigint * interval '1 millisecond',
	history = history || jsonb_build_array(jsonb_build_object('at', now(), 'from', owner, 'by', $3::text, 'attempt', attempt + 1))
WHERE id = $1 AND epoch = $2 AND deadline <= now()
RETURNING ` + cols),
		bury: r.Replace(`WITH d AS (DELETE FROM T_ WHERE id = $1 AND epoch = $2 RETURNING ` + cols + `),
	r AS (DELETE FROM T__retry WHERE id IN (SELECT id FROM d))
INSERT INTO T__dead (` + cols + `, died, reason) SELECT ` + cols + `, now(), $3 FROM d
ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, owner = excluded.owner, attempt = excluded.attempt,
	epoch = excluded.epoch, deadline = excluded.deadline, history = excluded.history, max_retries = excluded.max_retries,
	died = excluded.died, reason = excluded.reason`),
		dead: r.Replace(`SELECT ` + listed + `, died, reason FROM T__dead WHERE died <= $2 AND (died < $2 OR id > $3)
ORDER BY died DESC, id LIMIT $1`),
		deadJob: r.Replace(`SELECT ` + cols + `, died, reason FROM T__dead WHERE id = $1`),
		purge: r.Replace(`WITH d AS (DELETE FROM T__dead WHERE id = $1 RETURNING id),
	r AS (DELETE FROM T__retry WHERE id IN (SELECT id FROM d))
SELECT count(*) FROM d`),
		// The counts read pages of $2 rows in ID order after $1 (the
		// primary key): how many, how many expired, and the last ID.
		countJobs: r.Replace(`WITH p AS (SELECT id, deadline <= now() AS expired FROM T_ WHERE id > $1 ORDER BY id LIMIT $2)
SELECT count(*), count(*) FILTER (WHERE expired), (SELECT id FROM p ORDER BY id DESC LIMIT 1) FROM p`),
		countDead: r.Replace(`WITH p AS (SELECT id FROM T__dead WHERE id > $1 ORDER BY id LIMIT $2)
SELECT count(*), 0::bigint, (SELECT id FROM p ORDER BY id DESC LIMIT 1) FROM p`),
	}
}

// Setup creates the tables, index and sequence if they do not exist. The
// first operation runs it too; call it ahead when the application's role
// may not create tables (run it once with a role that may).
func (r *Registry) Setup(ctx context.Context) error {
	r.setupMu.Lock()
	defer r.setupMu.Unlock()
	if r.ready {
		return nil
	}
	if _, err := r.pool.Exec(ctx, r.q.setup); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			// Two processes raced to create the same object: it exists now.
			if _, err = r.pool.Exec(ctx, r.q.setup); err == nil {
				r.ready = true
				return nil
			}
		}
		return unavailable("setup", err)
	}
	r.ready = true
	return nil
}

func (r *Registry) ensure(ctx context.Context) error {
	r.setupMu.Lock()
	ready := r.ready
	r.setupMu.Unlock()
	if ready {
		return nil
	}
	return r.Setup(ctx)
}

func unavailable(op string, err error) error { return backendkit.Unavailable("pgjobs: "+op, err) }

func stale(ref jobs.Ref) error {
	return fmt.Errorf("%w: %s epoch %d", jobs.ErrStale, ref.ID, ref.Epoch)
}

type history struct {
	At      time.Time `json:"at"`
	From    string    `json:"from"`
	By      string    `json:"by"`
	Attempt int       `json:"attempt"`
}

func encodeHistory(h []jobs.Recovery) []byte {
	out := make([]history, len(h))
	for i, r := range h {
		out[i] = history(r)
	}
	b, _ := json.Marshal(out)
	return b
}

// scanJob reads the columns of cols, or (whole false) of listed, a job
// without its payload; and more into extra.
func scanJob(row pgx.Row, whole bool, extra ...any) (jobs.Job, error) {
	var j jobs.Job
	var id []byte
	var epoch int64
	var hist []byte
	dest := []any{&id, &j.Payload, &j.Owner, &j.Attempt, &epoch, &j.Deadline, &hist, &j.MaxRetries}
	if !whole {
		dest = slices.Delete(dest, 1, 2) // the payload
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return jobs.Job{}, err
	}
	j.ID, j.Epoch, j.History = string(id), uint64(epoch), decodeHistory(hist)
	return j, nil
}

// decodeHistory reads the history column. An entry that does not parse
// (written by something else) is skipped, and a column that is not an
// array reads as no history: one bad row never fails a listing, which
// would stop the recovery of every job.
func decodeHistory(b []byte) []jobs.Recovery {
	var raw []json.RawMessage
	if json.Unmarshal(b, &raw) != nil {
		return nil
	}
	var out []jobs.Recovery
	for _, m := range raw {
		var h history
		if json.Unmarshal(m, &h) == nil {
			out = append(out, jobs.Recovery(h))
		}
	}
	return out
}

// Track implements jobs.Registry: one INSERT … ON CONFLICT (one round trip),
// deadline on server time (now()), epoch from the sequence; an entry of the
// same ID is replaced (it goes stale). The statement deletes the ID's retry
// record and takes over its count, or the replaced entry's, as
// jobs.Registry says.
func (r *Registry) Track(ctx context.Context, job jobs.Job, lease time.Duration) (jobs.Job, error) {
	if err := jobs.CheckTrack(ctx, job, lease); err != nil {
		return jobs.Job{}, err
	}
	if err := r.ensure(ctx); err != nil {
		return jobs.Job{}, err
	}
	if job.Payload == nil {
		job.Payload = []byte{}
	}
	var epoch int64
	var hist []byte
	err := r.pool.QueryRow(ctx, r.q.track, []byte(job.ID), job.Payload, job.Owner, job.Attempt, lease.Milliseconds(),
		encodeHistory(job.History), job.MaxRetries, jobs.RetryWindow.Milliseconds()).
		Scan(&epoch, &job.Deadline, &job.Attempt, &job.MaxRetries, &hist)
	if err != nil {
		return jobs.Job{}, unavailable("track", err)
	}
	job.Epoch, job.History = uint64(epoch), decodeHistory(hist)
	return job, nil
}

// heartbeatChunk is the most jobs one heartbeat UPDATE extends (its own
// transaction, so that it holds its rows' locks for a couple of
// milliseconds at most). A variable for the tests of chunk boundaries.
var heartbeatChunk = 200

// Heartbeat implements jobs.Registry: one UPDATE … FROM unnest per
// heartbeatChunk (200) jobs, each its own transaction, all in one
// pipeline on one connection: one round trip of wall time plus the
// server's work, whatever the number of jobs; deadline on server time. It
// returns the IDs whose row of that epoch is gone. When some statements
// fail, the jobs of the others are extended and the error is a
// *jobs.HeartbeatError naming the failed statements' IDs.
func (r *Registry) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	if err := jobs.CheckHeartbeat(ctx, refs, lease); err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, nil
	}
	if err := r.ensure(ctx); err != nil {
		return nil, err
	}
	lost, unknown, err := r.heartbeatPipeline(ctx, refs, lease)
	switch {
	case err != nil && len(unknown) == len(refs):
		return nil, unavailable("heartbeat", err) // nothing is known
	case err != nil:
		return lost, &jobs.HeartbeatError{Unknown: unknown, Err: unavailable("heartbeat", err)}
	}
	return lost, nil
}

// heartbeatPipeline sends refs in chunks on one connection, one pipeline,
// a Sync after each statement (so each is a transaction of its own and a
// failed one leaves the others done); it returns the lost IDs of the
// statements that answered, and the IDs of those that failed with the
// first error.
func (r *Registry) heartbeatPipeline(ctx context.Context, refs []jobs.Ref, lease time.Duration) (lost, unknown []string, err error) {
	fail := func(from int, e error) ([]string, []string, error) {
		for _, ref := range refs[from:] {
			unknown = append(unknown, ref.ID)
		}
		return lost, unknown, cmp.Or(err, e)
	}
	conn, e := r.pool.Acquire(ctx)
	if e != nil {
		return fail(0, e)
	}
	defer conn.Release()
	pipe := conn.Conn().PgConn().StartPipeline(ctx)
	leaseArg := []byte(strconv.FormatInt(lease.Milliseconds(), 10))
	for lo := 0; lo < len(refs); lo += heartbeatChunk {
		ids, epochs := textArrays(refs[lo:min(lo+heartbeatChunk, len(refs))])
		pipe.SendQueryParams(r.q.heartbeat, [][]byte{ids, epochs, leaseArg}, nil, nil, []int16{1})
		pipe.SendPipelineSync()
	}
	if e := pipe.Flush(); e != nil {
		_ = pipe.Close()
		return fail(0, e)
	}
	for lo := 0; lo < len(refs); lo += heartbeatChunk {
		got, e := heartbeatResult(pipe)
		if e != nil {
			var pgErr *pgconn.PgError
			if !errors.As(e, &pgErr) {
				_ = pipe.Close()
				return fail(lo, e) // the connection: this chunk and the rest are unknown
			}
			// The statement failed on the server: its chunk is unknown,
			// the next ones (after the Sync) ran.
			for _, ref := range refs[lo:min(lo+heartbeatChunk, len(refs))] {
				unknown = append(unknown, ref.ID)
			}
			err = cmp.Or(err, e)
		}
		lost = append(lost, got...)
		if _, e := pipe.GetResults(); e != nil { // the Sync's
			_ = pipe.Close()
			return fail(min(lo+heartbeatChunk, len(refs)), e)
		}
	}
	if e := pipe.Close(); e != nil {
		err = cmp.Or(err, e)
	}
	return lost, unknown, err
}

// heartbeatResult reads the lost IDs of one heartbeat statement.
func heartbeatResult(pipe *pgconn.Pipeline) ([]string, error) {
	res, err := pipe.GetResults()
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return nil, fmt.Errorf("pgjobs: heartbeat: unexpected pipeline result %T", res)
	}
	var lost []string
	for rr.NextRow() {
		lost = append(lost, string(rr.Values()[0])) // bytea, binary format: the ID's bytes
	}
	_, err = rr.Close()
	return lost, err
}

// textArrays encodes the IDs and epochs of refs as bytea[] and bigint[]
// array literals (text format).
func textArrays(refs []jobs.Ref) (ids, epochs []byte) {
	ids, epochs = append(ids, '{'), append(epochs, '{')
	for i, ref := range refs {
		if i > 0 {
			ids, epochs = append(ids, ','), append(epochs, ',')
		}
		ids = append(ids, `"\\x`...)
		ids = hex.AppendEncode(ids, []byte(ref.ID))
		ids = append(ids, '"')
		epochs = strconv.AppendInt(epochs, int64(ref.Epoch), 10)
	}
	return append(ids, '}'), append(epochs, '}')
}

// Done implements jobs.Registry: one statement deletes the row of ref's
// epoch and the ID's retry record and records the completion in the
// markers table (dropping up to 16 markers older than jobs.DoneWindow); it returns nil when it deleted the
// row or found the epoch's marker (a retried Done), else jobs.ErrStale.
func (r *Registry) Done(ctx context.Context, ref jobs.Ref) error {
	if err := jobs.CheckID(ctx, ref.ID); err != nil {
		return err
	}
	if err := r.ensure(ctx); err != nil {
		return err
	}
	var completed bool
	if err := r.pool.QueryRow(ctx, r.q.done, []byte(ref.ID), int64(ref.Epoch), jobs.DoneWindow.Milliseconds()).Scan(&completed); err != nil {
		return unavailable("done", err)
	}
	if !completed {
		return stale(ref)
	}
	return nil
}

// Remove implements jobs.Registry: one statement deletes the row of ref's
// epoch, for the recoverer after a requeue, and records its retry record
// (dropping up to 16 records older than jobs.RetryWindow); else
// jobs.ErrStale.
func (r *Registry) Remove(ctx context.Context, ref jobs.Ref) error {
	if err := jobs.CheckID(ctx, ref.ID); err != nil {
		return err
	}
	if err := r.ensure(ctx); err != nil {
		return err
	}
	var n int64
	err := r.pool.QueryRow(ctx, r.q.remove, []byte(ref.ID), int64(ref.Epoch), jobs.RetryWindow.Milliseconds()).Scan(&n)
	switch {
	case err != nil:
		return unavailable("remove", err)
	case n == 0:
		return stale(ref)
	}
	return nil
}

// Expired implements jobs.Registry: one SELECT … WHERE deadline <= now()
// ORDER BY deadline, id LIMIT per page of listChunk (1,000) rows, each a
// range scan of the deadline index from the page before's last row: its
// cost grows with the expired count, not the tracked count (0: all). 100
// expired jobs are one round trip.
func (r *Registry) Expired(ctx context.Context, limit int) ([]jobs.Job, error) {
	return r.list(ctx, r.q.expired, limit, true)
}

// InFlight implements jobs.Inspector: pages of listChunk (1,000) tracked
// jobs in deadline order, one SELECT each, up to limit (0: all), of every
// column but the payload: the payloads never leave the server.
func (r *Registry) InFlight(ctx context.Context, limit int) ([]jobs.Job, error) {
	return r.list(ctx, r.q.inflight, limit, false)
}

// listChunk is the most rows one listing statement returns (a page of
// Expired, InFlight or Dead).
var listChunk = 1000

// pages reads up to limit (0 or less: all) rows of query, one statement
// per listChunk rows, each after the cursor of the page before: the last
// row's time (deadline, or time of death) and ID, from the first (from:
// -infinity or infinity). scan reads a row and its cursor. A page shorter
// than asked for is the last. Rows that change between two pages (a
// heartbeat, a completion) may be listed twice or not at all, as by any
// listing that is not one snapshot: the next scan sees them.
func pages[T any](ctx context.Context, r *Registry, query string, limit int, from pgtype.InfinityModifier, scan func(pgx.Row) (T, time.Time, string, error)) ([]T, error) {
	var out []T
	seen := map[string]bool{}
	at, after := pgtype.Timestamptz{InfinityModifier: from, Valid: true}, []byte{}
	for limit <= 0 || len(out) < limit {
		n := listChunk
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		rows, err := r.pool.Query(ctx, query, n, at, after)
		if err != nil {
			return nil, err
		}
		read := 0
		_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
			v, t, id, err := scan(row)
			if err != nil {
				return struct{}{}, err
			}
			read++
			at, after = pgtype.Timestamptz{Time: t, Valid: true}, []byte(id)
			if !seen[id] {
				seen[id] = true
				out = append(out, v)
			}
			return struct{}{}, nil
		})
		if err != nil {
			return nil, err
		}
		if read < n {
			break
		}
	}
	return out, nil
}

// list runs a listing query of jobs whole (the columns of cols) or not
// (of listed), in pages.
func (r *Registry) list(ctx context.Context, query string, limit int, whole bool) ([]jobs.Job, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	if err := r.ensure(ctx); err != nil {
		return nil, err
	}
	out, err := pages(ctx, r, query, limit, pgtype.NegativeInfinity, func(row pgx.Row) (jobs.Job, time.Time, string, error) {
		j, err := scanJob(row, whole)
		return j, j.Deadline, j.ID, err
	})
	if err != nil {
		return nil, unavailable("list", err)
	}
	return out, nil
}

// Reclaim implements jobs.Registry: one UPDATE of the row of ref's epoch
// whose deadline has passed (server time): a new epoch, Attempt+1, owner
// by, a deadline and a history entry; else jobs.ErrStale.
func (r *Registry) Reclaim(ctx context.Context, ref jobs.Ref, by string, lease time.Duration) (jobs.Job, error) {
	if err := jobs.CheckReclaim(ctx, ref, by, lease); err != nil {
		return jobs.Job{}, err
	}
	if err := r.ensure(ctx); err != nil {
		return jobs.Job{}, err
	}
	j, err := scanJob(r.pool.QueryRow(ctx, r.q.reclaim, []byte(ref.ID), int64(ref.Epoch), by, lease.Milliseconds()), true)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return jobs.Job{}, stale(ref)
	case err != nil:
		return jobs.Job{}, unavailable("reclaim", err)
	}
	return j, nil
}

// Bury implements jobs.Registry: one statement (DELETE … RETURNING into an
// INSERT) moves the row of ref's epoch to the dead table, time of death on
// server time, and deletes the ID's retry record; else jobs.ErrStale.
func (r *Registry) Bury(ctx context.Context, ref jobs.Ref, reason string) error {
	if err := jobs.CheckBury(ctx, ref, reason); err != nil {
		return err
	}
	if err := r.ensure(ctx); err != nil {
		return err
	}
	tag, err := r.pool.Exec(ctx, r.q.bury, []byte(ref.ID), int64(ref.Epoch), reason)
	switch {
	case err != nil:
		return unavailable("bury", err)
	case tag.RowsAffected() == 0:
		return stale(ref)
	}
	return nil
}

// scanDead reads a dead job: the columns of scanJob, then died and reason.
func scanDead(row pgx.Row, whole bool) (jobs.DeadJob, error) {
	var d jobs.DeadJob
	j, err := scanJob(row, whole, &d.DiedAt, &d.Reason)
	d.Job = j
	return d, err
}

// Dead implements jobs.Inspector: one SELECT per page of listChunk (1,000)
// rows of the dead table by its index on the time of death, the most
// recent first, up to limit (0: all), of
// every column but the payload: the payloads never leave the server
// (DeadJob reads one).
func (r *Registry) Dead(ctx context.Context, limit int) ([]jobs.DeadJob, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	if err := r.ensure(ctx); err != nil {
		return nil, err
	}
	out, err := pages(ctx, r, r.q.dead, limit, pgtype.Infinity, func(row pgx.Row) (jobs.DeadJob, time.Time, string, error) {
		d, err := scanDead(row, false)
		return d, d.DiedAt, d.ID, err
	})
	if err != nil {
		return nil, unavailable("dead", err)
	}
	return out, nil
}

// DeadJob implements jobs.Registry: one SELECT by ID, or jobs.ErrNotFound.
func (r *Registry) DeadJob(ctx context.Context, id string) (jobs.DeadJob, error) {
	if err := jobs.CheckID(ctx, id); err != nil {
		return jobs.DeadJob{}, err
	}
	if err := r.ensure(ctx); err != nil {
		return jobs.DeadJob{}, err
	}
	d, err := scanDead(r.pool.QueryRow(ctx, r.q.deadJob, []byte(id)), true)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return jobs.DeadJob{}, fmt.Errorf("%w: dead job %q", jobs.ErrNotFound, id)
	case err != nil:
		return jobs.DeadJob{}, unavailable("dead job", err)
	}
	return d, nil
}

// Purge implements jobs.Registry: one statement deletes the dead job and
// the ID's retry record, or returns jobs.ErrNotFound.
func (r *Registry) Purge(ctx context.Context, id string) error {
	if err := jobs.CheckID(ctx, id); err != nil {
		return err
	}
	if err := r.ensure(ctx); err != nil {
		return err
	}
	var n int64
	err := r.pool.QueryRow(ctx, r.q.purge, []byte(id)).Scan(&n)
	switch {
	case err != nil:
		return unavailable("purge", err)
	case n == 0:
		return fmt.Errorf("%w: dead job %q", jobs.ErrNotFound, id)
	}
	return nil
}

// countChunk is the most rows one counting statement reads.
var countChunk = 5000

// Counts implements jobs.Inspector: it counts the jobs in flight (and the
// expired among them) and the dead in pages of countChunk (5,000) rows in
// ID order, one SELECT each: its round trips grow with the jobs (2,000 at
// 10,000,000 in flight), no statement's work does. The pages are not one
// snapshot: jobs tracked or completed meanwhile may be counted or not.
func (r *Registry) Counts(ctx context.Context) (jobs.Counts, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return jobs.Counts{}, err
	}
	if err := r.ensure(ctx); err != nil {
		return jobs.Counts{}, err
	}
	var c jobs.Counts
	if err := r.count(ctx, r.q.countJobs, &c.Tracked, &c.Expired); err != nil {
		return jobs.Counts{}, unavailable("counts", err)
	}
	var none int64
	if err := r.count(ctx, r.q.countDead, &c.Dead, &none); err != nil {
		return jobs.Counts{}, unavailable("counts", err)
	}
	return c, nil
}

// count adds up the pages of a counting query.
func (r *Registry) count(ctx context.Context, query string, n, expired *int64) error {
	after := []byte{}
	for {
		var rows, exp int64
		var last []byte
		if err := r.pool.QueryRow(ctx, query, after, countChunk).Scan(&rows, &exp, &last); err != nil {
			return err
		}
		*n += rows
		*expired += exp
		if rows < int64(countChunk) {
			return nil
		}
		after = last
	}
}
