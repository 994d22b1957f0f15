// Package pgjobs is the PostgreSQL jobs.Registry: tables and sequences,
// which Setup creates (or the first operation, when the role may create
// tables):
//
//	<table>          in-flight jobs; a partial index on deadline (jobs in no
//	                 lease) and one on (lease, id) (jobs in a lease)
//	<table>_lease    leases: id, deadline, members; indexed by deadline
//	<table>_dead     the dead set, indexed by time of death
//	<table>_done     completion markers (epoch, id, time), indexed by time
//	<table>_retry    retry records of requeued jobs (id, attempt, max_retries,
//	                 history, time), indexed by time
//	<table>_epoch    the epoch sequence; <table>_lease_id the leases' ids
//
// Job IDs are bytea: an ID is opaque bytes (NUL and invalid UTF-8
// included), which text cannot hold. Setup converts the id column of
// tables made by earlier versions (text) in place, once, and adds what
// they lack (<table>_done, <table>_retry, <table>_lease, the max_retries
// and lease columns, with ALTER TABLE … ADD COLUMN IF NOT EXISTS, run only
// when the column is missing; the two indexes on the jobs table, then it
// drops the old <table>_deadline index): after an upgrade, run Setup once
// with a role that owns the tables when the application's role does not
// (its operations fail until then). Building the two indexes blocks the
// jobs' writes meanwhile (seconds per million jobs); on a large table,
// build them first with CREATE INDEX CONCURRENTLY under the same names
// and definitions (see the setup statement), and Setup finds them.
//
// # Leases
//
// A job is a member of a lease row, and its deadline is its lease's (a job
// in no lease has its own: one reclaimed, one tracked in place of an entry
// that was in a lease, until their first heartbeat). Track puts the job
// into a lease of its Registry in its one statement: one of 8 open leases,
// taken in turn (so that Tracks at once write different lease rows), or a
// new one of which it is the first member when that slot has none open. A
// lease is open to the Tracks of the Registry that made it, for a quarter
// of its lease after it was made, while it has fewer than 50 members and
// was last given that lease (by its Track, its joins or a heartbeat), and
// while no heartbeat of that Registry is extending it. A join adds 1 to
// the lease's members and moves its deadline to now() + lease when that is
// later: the job's deadline is the one asked for (at most 25 µs later,
// see Bounds), and the lease's other members are extended with it — a
// job's deadline may be later than its last Track or heartbeat asked, by
// at most the time its lease took joins after it (under a quarter of the
// lease; a job given up is recovered that much later at most). A join
// writes the lease row after the job's, under its lock, and only to a
// lease that exists and has not ended; else the statement fails whole and
// Track sends it again into a new lease: no job points to a missing lease,
// and no ended lease comes back. A Track in place of an entry in a lease
// takes that entry out and puts the job in none, so that no statement
// locks two lease rows.
//
// A heartbeat first locates the jobs it lists that are in no lease it
// knows (a process that heartbeats jobs another tracked, the jobs of the
// tables of earlier versions), reading their rows: the same statement
// moves those of them that are in no lease into a new lease (a job read
// in no lease that another moved meanwhile, which the statement's UPDATE
// sees once it has the row's lock, is left to the moving statement of the
// next round trip). It then adopts each lease of another Registry whose
// every member it lists (its count of members is the number of listed
// jobs in it): it extends the lease whole, with a statement that counts
// again, under the lease row's lock, the listed jobs still in it, and
// keeps it among its leases (for its later heartbeats, which count again
// each time, as that Registry's Tracks may join the lease; this Registry
// never joins it). So a heartbeat of 100,000 jobs that another Registry
// tracked writes about 2,000 lease rows and no job row, and one of
// 100,000 jobs in no lease writes each job's row once, in one round trip.
// The other jobs (in a lease whose members it lists only some of, or in
// one whose count changed meanwhile) move into new leases of up to 50,
// each job's row written once, in one statement per lease. A lease
// adopted while a listed member leaves it and a new one joins it, in the
// instant between the statement's snapshot and its lock, is extended with
// the new member (whose join set its deadline a moment before), and the
// leaver is reported extended, not lost (the heartbeat counts as before
// the leave). Members join a
// lease only through the Registry that made it, and leave it through any:
// every statement that takes a job out of a lease (Done, Remove, Bury,
// Reclaim, Track replacing it, a heartbeat moving it) decrements the
// lease's members under the lease row's lock, and deletes the lease at 0.
// Each Registry remembers which refs it tracked or moved into which lease
// (a map entry per job, dropped when the job leaves through it or its
// lease ends), and how many of its Tracks are joining each (sent, their
// reply not read). A heartbeat extends a lease whose every remembered ref
// is in its refs and that no Track is joining with one UPDATE of the lease
// row, WHERE members is the count it remembers, and no Track joins the
// lease until that UPDATE answers: a row back proves that every one of
// those refs is still a member (any other party's removal would have
// changed the count, and no join could make up for it), so they are all
// extended. The other refs — new ones, those of a lease that lost a
// member, that a Track was joining, or whose other members the heartbeat
// leaves out — move into new leases; a lost ref is one whose row of that
// epoch is gone. A Track of unknown outcome (its reply lost: the job may
// be a member) makes its Registry forget the lease it joined, whose jobs
// move at the next heartbeat, and an extension of unknown outcome closes
// its lease to joins. A job the caller stops heartbeating stays in its old
// lease and expires with it. So a heartbeat of 100,000 jobs that their
// Registry tracked, its first one included, updates about 2,000 lease rows
// and no job row.
//
// Reclaim of a job in a lease takes the lease row's lock with its
// deadline check (FOR UPDATE … WHERE deadline <= now(), which PostgreSQL
// re-checks after a heartbeat that extended the lease commits) before it
// takes the job, and decrements its members: a heartbeat and a Reclaim of
// the same job never both succeed. The locks are always taken job rows
// first, then lease rows. A statement that, once it has a job's lock,
// finds the job moved into a lease made after the statement began (by a
// heartbeat or a Track of its ID at once: the new lease row is not in its
// snapshot) fails whole and is sent again, up to 5 times (a heartbeat's moving
// statement in its next round trip): the counts stay exact.
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
// round trip but for listings longer than a page, a heartbeat of jobs in
// the leases of another Registry or moved by another at once (two:
// locate, then adopt and move) or in leases that lost members (one more),
// a heartbeat's first use of a connection (one more per kind of statement,
// to prepare it), and a statement sent again (above). Expired
// merges two index range scans, the jobs in no lease by deadline and the
// expired leases by deadline with their members, ORDER BY deadline, id
// LIMIT n: its cost grows with the
// number expired, not the number tracked. The operator listings (InFlight,
// Dead) select every column but the payload, which never leaves the
// server for them; they, Expired, Counts and Job.Deadline use a job's
// deadline as above (its lease's).
//
// # Bounds
//
// No statement that writes holds row locks over a set larger than a
// chunk, so that none holds them for more than a few milliseconds when
// the server has CPU to spare (measured below):
//
//   - Track, Done, Remove, Reclaim, Bury, Purge, DeadJob: one job each,
//     and one lease row (Track's: the one it joins or makes, or that of
//     the entry it replaces; Done and Remove also delete at most 16
//     expired markers or records).
//   - ReclaimEach, RemoveEach (the recovery scan's, jobs.BatchRecoverer):
//     Reclaim's or Remove's statement for each ref, each its own
//     transaction (a Sync after each), in one pipeline on one connection:
//     one round trip of wall time, and no lock held past one job's
//     statement (reclaims of 16 µs and removes of 11 µs of the server's
//     time, bench BenchmarkJobsScale/postgres/recover).
//   - Heartbeat: one UPDATE of up to 25 lease rows (FROM unnest) per 25
//     leases it extends; one statement per 50 jobs it locates, which reads
//     their rows and their leases' and writes the rows of those in no
//     lease, and a new lease's; one UPDATE of up to 10 leases of another
//     Registry (reading their listed jobs' rows, at most 500) per 10 it
//     adopts or extends; and one statement per 50 jobs it moves (a new
//     lease of those, the jobs' rows, their old leases' rows): leases have
//     at most 50 members. Each statement is prepared on its connection
//     (once; when the pool caches statements, pgx's default; after a
//     DISCARD ALL or DEALLOCATE ALL on the connection, the statements of
//     one heartbeat fail, unknown, and the next prepares them again) and
//     is its own transaction (a pipeline with a Sync after each) on one
//     connection: one round trip of wall time plus the server's work, and
//     a second round trip when a lease could not be extended (its jobs
//     move). A failed statement fails
//     its jobs alone (jobs.HeartbeatError), one that fails at its commit
//     (a deferred constraint, a serialization failure) too. The leases extended by one
//     statement get deadlines a microsecond apart (at most 25 µs past
//     the lease asked for), so that listing pages end at a lease.
//   - Expired, InFlight, Dead: one SELECT per page of 500 rows, each
//     after the last (deadline or time of death, id) of the page before, one
//     round trip per page: a scan of 100 expired jobs is one. A page reads
//     past its limit the rows that share its last deadline (an incremental
//     sort): the members of one lease (at most 50), or jobs tracked with
//     one deadline. Rows that move between two pages (a heartbeat, a
//     completion) may be listed twice — the registry drops the second — or
//     not at all: the next scan sees them.
//   - Counts reads the tables in pages of 5,000 rows in ID order, one
//     SELECT each (it locks no row): its round trips grow with the jobs
//     (2,000 at 10,000,000), no statement's work does. It is the
//     operator's view; the Runner never calls it.
//
// Measured at 10,000,000 jobs, 100 expired (bench BenchmarkJobsScale;
// docs/benchmarks.md "Scale" has the command; 2 cores shared by the
// server and the client, 2026-11-29, three runs of each version
// alternated, load average 1.5 to 3.3): a steady heartbeat of 100,000
// jobs (leases extended whole) takes 33 to 39 ms, and the first after
// their Track 69 to 71 ms, their statements 0.15 to 0.2 ms, the longest
// 0.5 ms; the first heartbeat of 100,000 jobs by a registry that did not
// track them takes, when another registry's leases hold them (adopted
// whole), 0.86 to 0.87 s, and its next ones 0.20 to 0.23 s; when they are
// in no lease (an earlier version's tables: every job's row is written),
// 1.53 to 1.61 s (2.8 to 2.9 s in the same runs before its statements
// were prepared and the locating statement moved them); the longest
// statement of these 1.2 to 5.5 ms, a typical one 0.3 to 0.7 ms; the
// recovery scan takes about 0.5 ms, with the jobs in leases or not,
// expired in leases or not. Track writes the lease row too: about 16 µs
// more of the server's time than a Track alone (some 20 against 35 µs),
// and a third fewer Tracks a second when they keep the server's CPU busy.
//
// The registry is as durable as the database: use a primary with
// synchronous_commit on (the default) for it.
//
// On a pool that prepares statements (pgx's default,
// QueryExecModeCacheStatement) the registry reads its results in the
// binary format, whatever the session's output settings (DateStyle,
// bytea_output, IntervalStyle, TimeZone). A pool that prepares none
// (QueryExecModeExec, QueryExecModeSimpleProtocol: for a pooler in
// transaction mode) reads results as text, which pgx parses only under
// DateStyle ISO and bytea_output hex, PostgreSQL's defaults: keep them
// for the registry's role.
package pgjobs

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

	cache leaseCache
	// fastStatements and slowStatements count the heartbeat statements
	// sent (for the tests).
	fastStatements, slowStatements atomic.Int64
	// adoptStatements and locateStatements count those that extend
	// another Registry's leases and those that locate jobs (for the tests).
	adoptStatements, locateStatements atomic.Int64
	// movesOnly, when set (by the tests), makes heartbeats move the jobs
	// of no cached lease at once, as before adoption; afterAdopt, when set,
	// runs once an adopting statement has answered, before its leases are
	// cached.
	movesOnly  bool
	afterAdopt func()
	// afterPlan, when set (by the tests), runs between a heartbeat's plan
	// and its statements; beforeTrack between a Track's choice of lease
	// and its statement, and afterTrack after it, with its error (which
	// it may replace).
	afterPlan   func()
	beforeTrack func()
	afterTrack  func(error) error
}

var (
	_ jobs.Registry       = (*Registry)(nil)
	_ jobs.Inspector      = (*Registry)(nil)
	_ jobs.BurialPurger   = (*Registry)(nil)
	_ jobs.BatchRecoverer = (*Registry)(nil)
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
	return &Registry{pool: pool, table: table, q: newQueries(table), cache: newLeaseCache()}, nil
}

type queries struct {
	setup, current, track, done, heartbeat, extend, locate, adopt, remove, expired, inflight, reclaim, bury, dead, deadJob, purge, countJobs, countDead string
}

const (
	cols = `id, payload, owner, attempt, epoch, deadline, history, max_retries`
	// listed are the columns of the operator listings (InFlight, Dead):
	// all but the payload, which stays on the server.
	listed = `id, owner, attempt, epoch, deadline, history, max_retries`
	// jcols and jlisted are cols and listed of the jobs table as j.
	jcols   = `j.id, j.payload, j.owner, j.attempt, j.epoch, j.deadline, j.history, j.max_retries`
	jlisted = `j.id, j.owner, j.attempt, j.epoch, j.deadline, j.history, j.max_retries`
)

// leave are the CTEs that take the jobs of CTE src (a column lease, one
// row per job that leaves its lease) out of their leases: each lease row is
// locked (after the jobs', always in that order), and its members
// decremented, or the row deleted when none are left. The decision is on
// the locked row's count, so concurrent leavers of one lease never lose a
// decrement. A job may have moved, once the statement locked it, into a
// lease made after the statement's snapshot: chk then fails the statement
// (retryMark), which must read chk's x (count(x): a statement that only
// asks whether chk has rows may never compute x). It ends with a comma.
func leave(src string) string {
	return `g AS (SELECT lease, count(*) AS n FROM ` + src + ` WHERE lease IS NOT NULL GROUP BY lease),
	ol AS (SELECT l.id, l.members, g.n FROM T__lease l JOIN g ON l.id = g.lease ORDER BY l.id FOR UPDATE OF l),
	od AS (DELETE FROM T__lease l USING ol WHERE l.id = ol.id AND ol.members <= ol.n),
	ou AS (UPDATE T__lease l SET members = l.members - ol.n FROM ol WHERE l.id = ol.id AND ol.members > ol.n),
	chk AS MATERIALIZED (SELECT ('` + retryMark + ` ' || g.lease)::bigint AS x FROM g WHERE NOT EXISTS (SELECT FROM ol WHERE ol.id = g.lease)),
	`
}

// retryMark starts the error of a statement that found a job in a lease
// made after the statement began (so the lease row is not in its snapshot,
// and it could not take the job out of it): the statement fails whole
// (chk, which each statement reads) and is sent again.
const retryMark = "pgjobs: retry: a job moved into a lease made meanwhile:"

// joinMark starts the error of a Track that would join a lease that ended
// or is gone (its members all left): the statement fails whole, and Track
// sends it again into a new lease.
const joinMark = "pgjobs: retry: the lease to join ended:"

// retrying calls f until its error is not a retry, at most 5 times.
func retrying(f func() error) error {
	for i := 0; ; i++ {
		if err := f(); !retry(err) || i == 4 {
			return err
		}
	}
}

// retry reports whether err is a statement's that must be sent again.
func retry(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, retryMark)
}

// effective is a job's deadline: its lease's when it has one.
const effective = `coalesce((SELECT l.deadline FROM T__lease l WHERE l.id = j.lease), j.deadline)`

func newQueries(t string) queries {
	r := strings.NewReplacer("T_", t)
	// The listings read pages of $1 rows after a cursor ($2, $3): the last
	// row's deadline (or time of death) and ID. A job's deadline is its
	// lease's when it has one: the jobs alone come from the partial index
	// on deadline, the leased ones from the leases' index on deadline and
	// then the members' index (lease, id); each part is ordered and
	// limited, and the two are merged.
	listing := func(sel, where string) string {
		// The leases in deadline order, then each one's members (LATERAL,
		// and OFFSET 0 keeps the planner from flattening it into a join
		// that starts from the jobs): an incremental sort by deadline, ID
		// of a lease's members at a time.
		leased := strings.ReplaceAll(sel, "j.deadline", "l.deadline")
		return `SELECT * FROM ((SELECT ` + sel + ` FROM T_ j WHERE j.lease IS NULL` + strings.ReplaceAll(where, "D_", "j.deadline") + `
	AND j.deadline >= $2 AND (j.deadline > $2 OR j.id > $3) ORDER BY j.deadline, j.id LIMIT $1)
UNION ALL (SELECT ` + leased + ` FROM (SELECT id, deadline FROM T__lease WHERE deadline >= $2` + strings.ReplaceAll(where, "D_", "deadline") + `
		ORDER BY deadline, id OFFSET 0) AS l,
	LATERAL (SELECT * FROM T_ j WHERE j.lease = l.id AND j.lease IS NOT NULL ORDER BY j.id OFFSET 0) AS j
	WHERE l.deadline > $2 OR j.id > $3 ORDER BY l.deadline, j.id LIMIT $1)) AS x ORDER BY deadline, id LIMIT $1`
	}
	return queries{
		// current is true when every object of setup is there in its
		// current form (setup would change nothing): it reads the catalog
		// and locks nothing.
		current: r.Replace(`SELECT to_regclass('T_') IS NOT NULL AND to_regclass('T__lease') IS NOT NULL
	AND to_regclass('T__dead') IS NOT NULL AND to_regclass('T__done') IS NOT NULL AND to_regclass('T__retry') IS NOT NULL
	AND to_regclass('T__epoch') IS NOT NULL AND to_regclass('T__lease_id') IS NOT NULL
	AND to_regclass('T__lease_deadline') IS NOT NULL AND to_regclass('T__dead_died') IS NOT NULL
	AND to_regclass('T__done_at') IS NOT NULL AND to_regclass('T__retry_at') IS NOT NULL
	AND to_regclass('T__solo') IS NOT NULL AND to_regclass('T__leased') IS NOT NULL AND to_regclass('T__deadline') IS NULL
	AND (SELECT count(*) FROM pg_attribute WHERE NOT attisdropped AND (
		(attrelid = to_regclass('T_') AND (attname IN ('max_retries', 'lease') OR attname = 'id' AND atttypid = 'bytea'::regtype))
		OR (attrelid = to_regclass('T__dead') AND (attname = 'max_retries' OR attname = 'id' AND atttypid = 'bytea'::regtype)))) = 5`),
		setup: r.Replace(`
CREATE SEQUENCE IF NOT EXISTS T__epoch;
CREATE SEQUENCE IF NOT EXISTS T__lease_id;
CREATE TABLE IF NOT EXISTS T_ (
	id       bytea PRIMARY KEY,
	payload  bytea NOT NULL,
	owner    text NOT NULL,
	attempt  int NOT NULL,
	epoch    bigint NOT NULL,
	deadline timestamptz NOT NULL,
	history  jsonb NOT NULL DEFAULT '[]',
	max_retries int NOT NULL DEFAULT 0,
	lease    bigint
);
CREATE TABLE IF NOT EXISTS T__lease (
	id       bigint PRIMARY KEY,
	deadline timestamptz NOT NULL,
	members  int NOT NULL
);
CREATE INDEX IF NOT EXISTS T__lease_deadline ON T__lease (deadline);
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
	IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'T_'::regclass AND attname = 'lease' AND NOT attisdropped) THEN
		ALTER TABLE T_ ADD COLUMN IF NOT EXISTS lease bigint;
	END IF;
END
$migrate$;
CREATE INDEX IF NOT EXISTS T__solo ON T_ (deadline) WHERE lease IS NULL;
CREATE INDEX IF NOT EXISTS T__leased ON T_ (lease, id) WHERE lease IS NOT NULL;
DROP INDEX IF EXISTS T__deadline;`),
		done: r.Replace(`WITH d AS (DELETE FROM T_ WHERE id = $1 AND epoch = $2 RETURNING id, epoch, lease),
	` + leave("d") + `r AS (DELETE FROM T__retry WHERE id IN (SELECT id FROM d)),
	m AS (INSERT INTO T__done (epoch, id, at) SELECT epoch, id, now() FROM d ON CONFLICT (epoch) DO NOTHING),
	gc AS (DELETE FROM T__done WHERE epoch IN (SELECT epoch FROM T__done
		WHERE at < now() - $3::bigint * interval '1 millisecond' ORDER BY at LIMIT 16 FOR UPDATE SKIP LOCKED))
SELECT (SELECT count(x) FROM chk) = 0 AND (EXISTS (SELECT FROM d) OR EXISTS (SELECT FROM T__done WHERE epoch = $2 AND id = $1))`),
		// track takes over the count of the ID's retry record (r, deleted:
		// consumed; p if still within the window) or of the entry it
		// replaces (ON CONFLICT, j): attempt and history unless the
		// caller's attempt is higher, max retries unless the caller's is
		// not 0. The entry it replaces (old, locked first) leaves its
		// lease; an entry that another Track inserted meanwhile and that is
		// in a lease is not replaced (no row: Track tries again).
		//
		// The job goes into a lease (nid): the open lease $9 it joins, or a
		// new one when $10, of which it is the first member; or into none
		// when the entry it replaces was in a lease (so that the statement
		// locks one lease row at most). The lease row is written only once
		// the job's is (the locks: the job's row first, then the lease's),
		// and only when it is (nl, jl read ins): a statement that writes no
		// job writes no lease. A join extends the lease to now() + $5 ms at
		// least, and only a lease that exists and has not ended: else jchk
		// fails the statement whole (joinMark) and Track sends it again,
		// into a new lease.
		track: r.Replace(`WITH old AS (SELECT id, lease FROM T_ WHERE id = $1 FOR UPDATE),
	` + leave("old") + `r AS (DELETE FROM T__retry WHERE id = $1
		RETURNING attempt, max_retries, history, at > now() - $8::bigint * interval '1 millisecond' AS fresh),
	p AS (SELECT attempt, max_retries, history FROM r WHERE fresh),
	nid AS MATERIALIZED (SELECT CASE WHEN $10::bool THEN nextval('T__lease_id') ELSE $9::bigint END AS id
		WHERE NOT EXISTS (SELECT FROM old WHERE lease IS NOT NULL)),
	ins AS (INSERT INTO T_ AS j (` + cols + `, lease)
		SELECT $1, $2, $3, CASE WHEN p.attempt >= $4::int THEN p.attempt ELSE $4::int END,
			nextval('T__epoch'), now() + $5::bigint * interval '1 millisecond',
			CASE WHEN p.attempt >= $4::int THEN p.history ELSE $6::jsonb END,
			CASE WHEN $7::int = 0 THEN coalesce(p.max_retries, 0) ELSE $7::int END, (SELECT id FROM nid)
		FROM (SELECT) AS one LEFT JOIN p ON true WHERE (SELECT count(x) FROM chk) = 0
		ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, owner = excluded.owner,
			attempt = greatest(j.attempt, excluded.attempt),
			history = CASE WHEN j.attempt >= excluded.attempt THEN j.history ELSE excluded.history END,
			max_retries = CASE WHEN $7::int = 0 THEN j.max_retries ELSE $7::int END,
			epoch = excluded.epoch, deadline = excluded.deadline, lease = excluded.lease
			WHERE j.lease IS NOT DISTINCT FROM (SELECT lease FROM old)
		RETURNING epoch, deadline, attempt, max_retries, history, lease),
	nl AS (INSERT INTO T__lease (id, deadline, members) SELECT lease, deadline, 1 FROM ins WHERE $10::bool AND lease IS NOT NULL
		RETURNING deadline),
	jl AS (UPDATE T__lease l SET members = l.members + 1, deadline = greatest(l.deadline, now() + $5::bigint * interval '1 millisecond')
		WHERE NOT $10::bool AND l.id = (SELECT lease FROM ins) AND l.deadline > now() RETURNING l.deadline),
	jchk AS MATERIALIZED (SELECT ('` + joinMark + ` ' || ins.lease)::bigint AS x FROM ins
		WHERE ins.lease IS NOT NULL AND NOT EXISTS (SELECT FROM nl) AND NOT EXISTS (SELECT FROM jl))
SELECT epoch, coalesce((SELECT deadline FROM jl), deadline), attempt, max_retries, history, lease FROM ins
WHERE (SELECT count(x) FROM jchk) = 0`),
		// heartbeat moves the live jobs of a chunk ($1, $2) into a new lease
		// of deadline now() + $3 ms, taking them out of their old leases;
		// it returns the new lease (NULL: none live) with each ref (ID and
		// epoch) it did not find (lost: another epoch of the ID in the
		// chunk, moved, does not hide it), then a row with a NULL ID.
		heartbeat: r.Replace(`WITH r AS (SELECT DISTINCT * FROM unnest($1::bytea[], $2::bigint[]) AS r(id, epoch)),
	mv AS (SELECT j.id, j.lease FROM T_ j JOIN r ON j.id = r.id AND j.epoch = r.epoch ORDER BY j.id FOR UPDATE OF j),
	nl AS (INSERT INTO T__lease (id, deadline, members)
		SELECT nextval('T__lease_id'), now() + $3::bigint * interval '1 millisecond', count(*) FROM mv HAVING count(*) > 0
		RETURNING id),
	` + leave("mv") + `u AS (UPDATE T_ j SET lease = nl.id FROM mv, nl WHERE j.id = mv.id RETURNING j.id, j.epoch)
SELECT (SELECT id FROM nl), r.id, r.epoch FROM r WHERE NOT EXISTS (SELECT FROM u WHERE u.id = r.id AND u.epoch = r.epoch)
UNION ALL SELECT (SELECT id FROM nl), NULL, NULL WHERE (SELECT count(x) FROM chk) = 0`),
		// extend moves the deadline of each lease ($1) that still has the
		// members the registry counts ($2) to now() + $3 ms (plus a
		// microsecond per place in the list, so that no two leases of a
		// statement share a deadline: a listing's page ends at a lease),
		// and returns the leases it extended.
		// The rows are locked in order of ID first (lk), as every statement
		// that locks several lease rows does (adopt, leave): a join the
		// planner picks would lock them in the table's order, and two
		// statements extending the same leases at once (the Registry that
		// made them and one that adopted them) deadlocked
		// (TestExtendAndAdoptOfTheSameLeasesAtOnce).
		extend: r.Replace(`WITH c AS (SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS c(id, n, o)),
	lk AS (SELECT l.id FROM T__lease l JOIN c ON l.id = c.id AND l.members = c.n ORDER BY l.id FOR UPDATE OF l)
UPDATE T__lease l SET deadline = now() + $3::bigint * interval '1 millisecond' + c.o * interval '1 microsecond'
FROM c, lk WHERE l.id = c.id AND l.id = lk.id AND l.members = c.n RETURNING l.id`),
		// locate moves the jobs of a chunk ($1, $2: distinct refs) that
		// are in no lease into a new lease of deadline now() + $3 ms, and
		// finds the lease of each other one (it locks their rows not):
		// a row per job found, its place in the chunk (from 1), its lease
		// and that lease's members — 0 for a job it moved (into the new
		// lease), NULL for one whose lease is gone or that it found in no
		// lease but did not move (a heartbeat or a Track moved it into a
		// lease meanwhile, which the lock's second look at the row sees:
		// it moves next, with the moving statement). A job not listed is
		// lost (its row of that epoch is gone). Each job is looked up by
		// its ID alone (LATERAL, OFFSET 0), and the lock tests its lease
		// with coalesce (lease IDs start at 1), which no partial index's
		// predicate matches, so that the planner has no other index to
		// choose: a statement that says the job is in a lease (as a join
		// with the leases does) lets it use the index of leased jobs,
		// (lease, id), and read the whole index for each job (0.14 ms a
		// statement became 300 to 700 ms at 10,000,000 jobs once that
		// index's statistics changed). The rows to move are locked in ID
		// order (lk: FOR UPDATE after ORDER BY), as every statement that
		// locks several job rows does: an UPDATE alone locks them in the
		// order of its plan, which on a small table is the table's
		// (a sequential scan), and deadlocked with a moving statement of
		// the same jobs (TestLocateAndMoveOfTheSameJobsAtOnce).
		locate: r.Replace(`WITH r AS MATERIALIZED (SELECT * FROM unnest($1::bytea[], $2::bigint[]) WITH ORDINALITY AS r(id, epoch, o) ORDER BY id),
	x AS MATERIALIZED (SELECT r.o, r.id, r.epoch, s.lease FROM r, LATERAL (SELECT j.lease FROM T_ j WHERE j.id = r.id AND j.epoch = r.epoch OFFSET 0) AS s),
	lk AS MATERIALIZED (SELECT j.id FROM T_ j JOIN x ON j.id = x.id
		WHERE x.lease IS NULL AND j.epoch = x.epoch AND coalesce(j.lease, 0) = 0 ORDER BY j.id FOR UPDATE OF j),
	nl AS (INSERT INTO T__lease (id, deadline, members)
		SELECT nextval('T__lease_id'), now() + $3::bigint * interval '1 millisecond', count(*) FROM lk HAVING count(*) > 0
		RETURNING id),
	u AS (UPDATE T_ j SET lease = nl.id FROM lk, nl WHERE j.id = lk.id RETURNING j.id)
SELECT x.o, CASE WHEN u.id IS NULL THEN x.lease ELSE (SELECT id FROM nl) END,
	CASE WHEN u.id IS NULL THEN (SELECT l.members FROM T__lease l WHERE l.id = x.lease) ELSE 0 END
FROM x LEFT JOIN u ON u.id = x.id`),
		// adopt extends, as extend does, each lease ($1) of another
		// Registry that still has the members the registry counts ($2),
		// when as many of the jobs it lists in it ($4, $5, $6: lease, ID,
		// epoch) are still in it: then every member is one it lists (that
		// Registry's Tracks may join the lease, so its count alone proves
		// nothing). The lease rows are locked in order of ID.
		adopt: r.Replace(`WITH c AS (SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS c(id, n, o)),
	k AS (SELECT r.lease, count(*) AS n FROM unnest($4::bigint[], $5::bytea[], $6::bigint[]) AS r(lease, id, epoch),
		LATERAL (SELECT FROM T_ j WHERE j.id = r.id AND j.epoch = r.epoch AND j.lease = r.lease OFFSET 0) AS x GROUP BY r.lease),
	lk AS (SELECT l.id FROM T__lease l JOIN c ON l.id = c.id JOIN k ON k.lease = c.id AND k.n = c.n ORDER BY l.id FOR UPDATE OF l)
UPDATE T__lease l SET deadline = now() + $3::bigint * interval '1 millisecond' + c.o * interval '1 microsecond'
FROM c, lk WHERE l.id = c.id AND l.id = lk.id AND l.members = c.n RETURNING l.id`),
		remove: r.Replace(`WITH d AS (DELETE FROM T_ WHERE id = $1 AND epoch = $2 RETURNING id, attempt, max_retries, history, lease),
	` + leave("d") + `m AS (INSERT INTO T__retry (id, attempt, max_retries, history, at) SELECT id, attempt, max_retries, history, now() FROM d
		ON CONFLICT (id) DO UPDATE SET attempt = excluded.attempt, max_retries = excluded.max_retries,
			history = excluded.history, at = excluded.at),
	gc AS (DELETE FROM T__retry WHERE id <> $1 AND id IN (SELECT id FROM T__retry
		WHERE at < now() - $3::bigint * interval '1 millisecond' ORDER BY at LIMIT 16 FOR UPDATE SKIP LOCKED))
SELECT (SELECT count(*) FROM d) + (SELECT count(x) FROM chk)`),
		expired:  r.Replace(listing(jcols, " AND D_ <= now()")),
		inflight: r.Replace(listing(jlisted, "")),
		// reclaim locks the job (j0), then its lease if that has expired
		// (lk: FOR UPDATE re-checks the deadline after a heartbeat that
		// extended it commits), and takes the job only with that lock, or,
		// for a job alone, when its own deadline has passed; the job
		// leaves its lease.
		reclaim: r.Replace(`WITH j0 AS (SELECT id, lease FROM T_ WHERE id = $1 AND epoch = $2 FOR UPDATE),
	lk AS (SELECT l.id, l.members, l.deadline FROM T__lease l WHERE l.id = (SELECT lease FROM j0) AND l.deadline <= now() FOR UPDATE),
	u AS (UPDATE T_ j SET epoch = nextval('T__epoch'), attempt = j.attempt + 1, owner = $3,
		deadline = now() + $4::bigint * interval '1 millisecond', lease = NULL,
		history = j.history || jsonb_build_array(jsonb_build_object('at', now(), 'from', j.owner, 'by', $3::text, 'attempt', j.attempt + 1))
		FROM j0 WHERE j.id = j0.id AND j.epoch = $2
			AND CASE WHEN j0.lease IS NULL THEN j.deadline <= now() ELSE EXISTS (SELECT FROM lk) END
		RETURNING j.id, j.payload, j.owner, j.attempt, j.epoch, j.deadline, j.history, j.max_retries),
	od AS (DELETE FROM T__lease l USING lk WHERE l.id = lk.id AND lk.members <= 1 AND EXISTS (SELECT FROM u)),
	ou AS (UPDATE T__lease l SET members = l.members - 1 FROM lk WHERE l.id = lk.id AND lk.members > 1 AND EXISTS (SELECT FROM u))
SELECT * FROM u`),
		bury: r.Replace(`WITH d AS (DELETE FROM T_ j WHERE id = $1 AND epoch = $2 RETURNING ` + jcols + `, lease),
	` + leave("d") + `r AS (DELETE FROM T__retry WHERE id IN (SELECT id FROM d))
INSERT INTO T__dead (` + cols + `, died, reason) SELECT id, payload, owner, attempt, epoch,
	coalesce((SELECT l.deadline FROM T__lease l WHERE l.id = d.lease), d.deadline), history, max_retries, now(), $3 FROM d
WHERE (SELECT count(x) FROM chk) = 0
ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, owner = excluded.owner, attempt = excluded.attempt,
	epoch = excluded.epoch, deadline = excluded.deadline, history = excluded.history, max_retries = excluded.max_retries,
	died = excluded.died, reason = excluded.reason`),
		dead: r.Replace(`SELECT ` + listed + `, died, reason FROM T__dead WHERE died <= $2 AND (died < $2 OR id > $3)
ORDER BY died DESC, id LIMIT $1`),
		deadJob: r.Replace(`SELECT ` + cols + `, died, reason FROM T__dead WHERE id = $1`),
		// $2: the epoch the dead job must have been buried at (the retry
		// record is then left: see jobs.BurialPurger), or NULL.
		purge: r.Replace(`WITH d AS (DELETE FROM T__dead WHERE id = $1 AND ($2::bigint IS NULL OR epoch = $2) RETURNING id),
	r AS (DELETE FROM T__retry WHERE $2::bigint IS NULL AND id IN (SELECT id FROM d))
SELECT count(*) FROM d`),
		// The counts read pages of $2 rows in ID order after $1 (the
		// primary key): how many, how many expired (by the lease's
		// deadline for a leased job), and the last ID.
		countJobs: r.Replace(`WITH p AS (SELECT j.id, ` + effective + ` <= now() AS expired FROM T_ j WHERE j.id > $1 ORDER BY j.id LIMIT $2)
SELECT count(*), count(*) FILTER (WHERE expired), (SELECT id FROM p ORDER BY id DESC LIMIT 1) FROM p`),
		countDead: r.Replace(`WITH p AS (SELECT id FROM T__dead WHERE id > $1 ORDER BY id LIMIT $2)
SELECT count(*), 0::bigint, (SELECT id FROM p ORDER BY id DESC LIMIT 1) FROM p`),
	}
}

// Setup creates the tables, index and sequence if they do not exist. The
// first operation runs it too; call it ahead when the application's role
// may not create tables (run it once with a role that may). When they all
// exist in their current form it only reads the catalog: it locks no
// table, so that a process that starts waits for no other's writes, and
// makes none wait (its statements would take share locks on the tables,
// one after another in one transaction, and deadlock with a writer).
func (r *Registry) Setup(ctx context.Context) error {
	r.setupMu.Lock()
	defer r.setupMu.Unlock()
	if r.ready {
		return nil
	}
	var current bool
	if err := r.pool.QueryRow(ctx, r.q.current).Scan(&current); err != nil {
		return unavailable("setup", err)
	}
	if current {
		r.ready = true
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

// encodeHistory is the history column's JSON, a string, not bytes: a pool
// that prepares no statement (pgx.QueryExecModeExec) sends an argument as
// the type its Go type names, and []byte names bytea, which the jsonb
// cast then reads as text ("\x5b…": invalid JSON).
func encodeHistory(h []jobs.Recovery) string {
	out := make([]history, len(h))
	for i, r := range h {
		out[i] = history(r)
	}
	b, _ := json.Marshal(out)
	return string(b)
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

// Track implements jobs.Registry: one statement (one round trip), deadline
// on server time (now()), epoch from the sequence; an entry of the same ID
// is replaced (it goes stale). The statement deletes the ID's retry record
// and takes over its count, or the replaced entry's, as jobs.Registry
// says. It puts the job into one of the Registry's open leases, or into a
// new one (see the package doc), so that its heartbeats extend the lease
// whole; a job that replaces an entry in a lease stays in none until its
// first heartbeat.
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
	var leaseID *int64
	var err error
	fresh := false // a join found its lease ended: into a new lease
	for range 5 {
		start := time.Now()
		t := r.cache.pick(lease, start, fresh)
		if r.beforeTrack != nil {
			r.beforeTrack()
		}
		err = r.pool.QueryRow(ctx, r.q.track, []byte(job.ID), job.Payload, job.Owner, job.Attempt, lease.Milliseconds(),
			encodeHistory(job.History), job.MaxRetries, jobs.RetryWindow.Milliseconds(), t.join(), t.l == nil).
			Scan(&epoch, &job.Deadline, &job.Attempt, &job.MaxRetries, &hist, &leaseID)
		if r.afterTrack != nil {
			err = r.afterTrack(err)
		}
		// No row: an entry another Track inserted meanwhile moved into a
		// lease before this statement could replace it; again (and on a
		// retry error, and into a new lease when the one to join ended).
		// Those wrote nothing.
		switch {
		case err == nil:
			r.cache.tracked(t, start, jobs.Ref{ID: job.ID, Epoch: uint64(epoch)}, leaseID)
		case errors.Is(err, pgx.ErrNoRows) || retry(err):
			r.cache.unanswered(t, true)
			continue
		case joinFailed(err):
			r.cache.unanswered(t, false)
			fresh = true
			continue
		default:
			r.cache.unanswered(t, false) // unknown: the job may have joined
		}
		break
	}
	if err != nil {
		return jobs.Job{}, unavailable("track", err)
	}
	job.Epoch, job.History = uint64(epoch), decodeHistory(hist)
	return job, nil
}

// joinFailed reports whether err is a Track's that could not join its
// lease (joinMark).
func joinFailed(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, joinMark)
}

// heartbeatChunk is the most jobs one heartbeat statement moves into a
// new lease, or locates (its own transaction, so that it holds its rows'
// locks for a millisecond or so): a lease has at most that many members.
// A variable for the tests of chunk boundaries.
var heartbeatChunk = 50

// extendChunk is the most leases one heartbeat statement extends (one
// small row each).
var extendChunk = 25

// adoptChunk is the most leases of another Registry one heartbeat
// statement extends: it reads their listed jobs' rows too (up to 50
// each).
var adoptChunk = 10

// trackSlots is how many open leases a Registry's Tracks join, in turn:
// Tracks at once go to different lease rows, and do not wait for each
// other's row lock. A variable for the tests.
var trackSlots = 8

// leaseCache is what a Registry knows of the leases it made: for each, the
// refs it moved or tracked in (less those it has seen leave since), and
// when the lease ends (on the local clock, to forget the leases no longer
// heartbeated). Its invariant: a lease's members on the server are a
// subset of its cached refs and of the jobs of its pending joins (Tracks
// sent and not answered), as members only ever join a lease through this
// Registry and leave it otherwise, and a ref is dropped from the cache
// only once it is known to have left. A heartbeat extends whole only a
// lease with no pending join, and a Track joins no lease that a heartbeat
// is extending (a plan counted it, and the statement has not answered):
// the joins and the extensions of a lease never overlap. So a lease whose
// count of members is the count of its cached refs when it is extended has
// exactly those: extending it extends them all. A join whose outcome is
// not known (its reply lost) drops its lease from the cache, as does an
// extension of unknown outcome from the open leases: neither is trusted
// again.
type leaseCache struct {
	mu     sync.Mutex
	leases map[int64]*cachedLease
	of     map[jobs.Ref]*cachedRef
	plans  uint64 // plans made: a stamp that tells a plan's counts from the last one's
	// slots are the open leases Tracks join, the next one in turn.
	slots []*cachedLease
	next  int
}

// cachedRef is a cached ref's lease; a ref is cached in lease l when
// of[ref].lease == l and l is in leases.
type cachedRef struct {
	lease *cachedLease
	plan  uint64 // the plan that last counted it
}

// fastLease is a lease a heartbeat may extend whole, with its count of
// cached refs then (all in the heartbeat), and those refs when the lease
// is another Registry's (its statement counts them on the server).
type fastLease struct {
	*cachedLease
	n       int
	counted []jobs.Ref
}

type cachedLease struct {
	id    int64
	refs  []jobs.Ref // moved or tracked in; those cached here still are n of them
	n     int
	until time.Time
	plan  uint64 // the plan that last counted its refs
	seen  int    // how many, in that plan
	// The leases Track made take joins while open: for a quarter of
	// their lease from made, of the same lease (dur, the lease its
	// deadline was last set to) and below heartbeatChunk members.
	made      time.Time
	dur       time.Duration
	closed    bool // never joined again
	pending   int  // joins sent and not answered
	extending int  // heartbeats that extend it whole, sent and not answered
	// foreign: made by another Registry, and adopted by a heartbeat that
	// listed its every member. That Registry's Tracks may join it, so its
	// extension counts on the server the cached refs still in it
	// (adoptStatement), and this Registry never joins it (closed).
	foreign bool
}

func newLeaseCache() leaseCache {
	return leaseCache{leases: map[int64]*cachedLease{}, of: map[jobs.Ref]*cachedRef{}, slots: make([]*cachedLease, trackSlots)}
}

// ticket is a Track's place in the cache: the open lease it joins (a join
// pending), or nil for a new lease in slot.
type ticket struct {
	l     *cachedLease
	slot  int
	lease time.Duration
}

// join is the lease a Track joins, as its statement's argument: nil for a
// new one.
func (t ticket) join() *int64 {
	if t.l == nil {
		return nil
	}
	return &t.l.id
}

// pick returns a Track's ticket: the open lease of the next slot when it
// may take a job of lease at now (its join then pending), else, or when
// fresh, a new lease for that slot.
func (c *leaseCache) pick(lease time.Duration, now time.Time, fresh bool) ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.next
	c.next = (c.next + 1) % len(c.slots)
	l := c.slots[s]
	if fresh || l == nil || l.closed || c.leases[l.id] != l || l.extending > 0 || l.n+l.pending >= heartbeatChunk ||
		l.dur != lease || !now.Before(l.made.Add(lease/4)) || !now.Before(l.until) {
		return ticket{slot: s, lease: lease}
	}
	l.pending++
	return ticket{l: l, slot: s, lease: lease}
}

// tracked records a Track sent with ticket t at start: the job tracked as
// ref, in lease id (nil: in none, as it replaced an entry in a lease).
func (c *leaseCache) tracked(t ticket, start time.Time, ref jobs.Ref, id *int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := t.l
	switch {
	case l != nil:
		l.pending--
		if id != nil && *id == l.id && c.leases[l.id] == l {
			l.refs = append(l.refs, ref)
			l.n++
			if until := start.Add(t.lease); until.After(l.until) {
				l.until = until
			}
			c.of[ref] = &cachedRef{lease: l}
		}
	case id != nil:
		c.sweep(start) // a Registry that Tracks and never heartbeats forgets them too
		l = &cachedLease{id: *id, refs: []jobs.Ref{ref}, n: 1, until: start.Add(t.lease), made: start, dur: t.lease}
		c.leases[l.id] = l
		c.of[ref] = &cachedRef{lease: l}
		c.slots[t.slot] = l
	}
}

// unanswered records a Track sent with ticket t that tracked nothing
// (none: it wrote nothing, and may be sent again) or whose outcome is
// unknown: the lease it joined is dropped, its join failed (the lease
// ended) or may have happened.
func (c *leaseCache) unanswered(t ticket, none bool) {
	if t.l == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := t.l
	l.pending--
	if !none {
		l.closed = true
		if c.leases[l.id] == l {
			c.drop(l)
		}
	}
}

// plan splits the distinct refs of a heartbeat into the leases it may
// extend whole (each with its count of cached refs) and the refs it must
// move into new leases (in the order of refs): those of no cached lease,
// those of a lease with cached refs that the heartbeat leaves out (which
// stays behind with them and is forgotten), and those of a lease with a
// join pending (forgotten too: its new member is not known yet). The
// leases to extend take no join until the heartbeat's statement answers
// (extended, unextended). It forgets the leases that ended before now.
// One map lookup a ref, when all are cached.
func (c *leaseCache) plan(refs []jobs.Ref, now time.Time) (fast []fastLease, slow []jobs.Ref) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(now)
	c.plans++
	var touched []*cachedLease
	uncached := false
	for _, ref := range refs {
		e := c.of[ref]
		switch {
		case e == nil:
			uncached = true
		case e.plan == c.plans: // listed twice
		default:
			e.plan = c.plans
			if e.lease.plan != c.plans {
				e.lease.plan, e.lease.seen = c.plans, 0
				touched = append(touched, e.lease)
			}
			e.lease.seen++
		}
	}
	for _, l := range touched {
		if l.seen == l.n && l.pending == 0 {
			l.extending++
			f := fastLease{cachedLease: l, n: l.n}
			if l.foreign {
				f.counted = c.cachedIn(l)
			}
			fast = append(fast, f)
		} else {
			c.drop(l)
			uncached = true
		}
	}
	slices.SortFunc(fast, func(a, b fastLease) int { return cmp.Compare(a.id, b.id) })
	if uncached {
		seen := map[jobs.Ref]bool{}
		for _, ref := range refs {
			if c.of[ref] == nil && !seen[ref] {
				seen[ref] = true
				slow = append(slow, ref)
			}
		}
	}
	return fast, slow
}

// cachedIn returns the refs cached in l (c.mu held).
func (c *leaseCache) cachedIn(l *cachedLease) []jobs.Ref {
	refs := make([]jobs.Ref, 0, l.n)
	for _, ref := range l.refs {
		if e := c.of[ref]; e != nil && e.lease == l {
			refs = append(refs, ref)
		}
	}
	return refs
}

// sweep forgets the leases that ended before now (c.mu held).
func (c *leaseCache) sweep(now time.Time) {
	for _, l := range c.leases {
		if now.After(l.until) {
			c.drop(l)
		}
	}
}

// drop forgets a lease (c.mu held).
func (c *leaseCache) drop(l *cachedLease) {
	for _, ref := range l.refs {
		if e := c.of[ref]; e != nil && e.lease == l {
			delete(c.of, ref)
		}
	}
	delete(c.leases, l.id)
}

// put records a new lease and the refs moved into it (out of the leases
// they were cached in), or a lease of another Registry adopted whole
// (foreign). A ref cached in a lease of a higher ID stays there: a job's
// lease only changes by a move, into a lease made then (the highest ID
// yet; a move of the job at once waits for its row and is sent again),
// so that lease is the newer, and this put comes from a statement that
// committed before it (two heartbeats at once, whose replies are read in
// either order). Without that, a put would take the ref out of the lease
// the server has it in, and the cached count would no longer prove the
// members.
func (c *leaseCache) put(id int64, refs []jobs.Ref, until time.Time, foreign bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := make([]jobs.Ref, 0, len(refs))
	for _, ref := range refs {
		if e := c.of[ref]; e != nil && e.lease.id > id && c.leases[e.lease.id] == e.lease {
			continue
		}
		kept = append(kept, ref)
	}
	if len(kept) == 0 {
		return
	}
	l := &cachedLease{id: id, refs: kept, n: len(kept), until: until, foreign: foreign, closed: foreign}
	for _, ref := range kept {
		c.leave(ref)
		c.of[ref] = &cachedRef{lease: l}
	}
	c.leases[id] = l
}

// leave drops ref from its lease (c.mu held).
func (c *leaseCache) leave(ref jobs.Ref) {
	e := c.of[ref]
	if e == nil {
		return
	}
	delete(c.of, ref)
	if l := e.lease; c.leases[l.id] == l {
		if l.n--; l.n == 0 && l.pending == 0 {
			delete(c.leases, l.id) // gone on the server: its last member left
		}
	}
}

// extended records the new end (until, for lease) of the leases extended
// and forgets the others of fast, returning the refs moved into them that
// the heartbeat lists (listed): all it counted, even when a heartbeat
// running at once has moved some elsewhere since.
func (c *leaseCache) extended(fast []fastLease, ok map[int64]bool, until time.Time, lease time.Duration, listed func(jobs.Ref) bool) (again []jobs.Ref) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range fast {
		l := f.cachedLease
		l.extending--
		if ok[l.id] {
			l.until, l.dur = until, lease
			continue
		}
		for _, ref := range l.refs {
			if listed(ref) {
				again = append(again, ref)
			}
		}
		if c.leases[l.id] == l {
			c.drop(l)
		}
	}
	return again
}

// unextended records that the statement extending fast failed, or was
// not sent: those leases take no join again (an extension of unknown
// outcome may yet run on the server).
func (c *leaseCache) unextended(fast []fastLease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range fast {
		f.extending--
		f.closed = true
	}
}

// forget drops a ref known to have left its lease (completed, removed,
// buried, reclaimed or lost).
func (c *leaseCache) forget(ref jobs.Ref) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leave(ref)
}

// Heartbeat implements jobs.Registry with leases: the jobs a Registry
// heartbeats are members of lease rows, and a heartbeat extends a lease
// whole, one small row, when the lease still has exactly the members the
// Registry moved in (its count proves it: see the package doc), or, for a
// lease of another Registry that it adopted, when the server counts in it
// every job the Registry knows in it. The refs of no lease it knows are
// located first (one statement per heartbeatChunk, 50), which moves those
// in no lease into a new lease: a lease of another Registry whose every
// member they include is then adopted (extended whole); the other refs
// (those of a lease that lost a member or whose other members the
// heartbeat leaves out) move into new leases, one statement of up to
// heartbeatChunk jobs each. Every statement is its own transaction, each
// round in one pipeline on one connection: one round trip of wall time,
// two when some refs are in leases it does not know (or were moved by
// another at once), one more when a lease could not be extended;
// deadline on server time. It returns
// the IDs whose row of that epoch is gone. When some statements fail, the
// jobs of the others are extended and the error is a *jobs.HeartbeatError
// naming the failed statements' IDs.
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
	lost, unknown, err := r.heartbeat(ctx, refs, lease)
	switch {
	case err != nil && len(unknown) == len(refs):
		return nil, unavailable("heartbeat", err) // nothing is known
	case err != nil:
		return lost, &jobs.HeartbeatError{Unknown: unknown, Err: unavailable("heartbeat", err)}
	}
	return lost, nil
}

// heartbeat extends the cached leases of refs whole and moves the other
// refs, and those of the leases it could not extend, into new leases; it
// returns the lost IDs and those of unknown outcome, in the order of refs,
// with the first error.
func (r *Registry) heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) (lost, unknown []string, err error) {
	start := time.Now()
	until := start.Add(lease)
	fast, slow := r.cache.plan(refs, start)
	if r.afterPlan != nil {
		r.afterPlan()
	}
	lostRefs, unknownRefs := map[jobs.Ref]bool{}, map[jobs.Ref]bool{}
	result := func() ([]string, []string, error) {
		if len(lostRefs)+len(unknownRefs) == 0 {
			return nil, nil, err
		}
		for _, ref := range refs {
			switch {
			case unknownRefs[ref]:
				unknown = append(unknown, ref.ID)
			case lostRefs[ref]:
				lost = append(lost, ref.ID)
			}
		}
		return lost, unknown, err
	}
	conn, e := r.pool.Acquire(ctx)
	if e != nil {
		r.cache.unextended(fast)
		for _, ref := range refs {
			unknownRefs[ref] = true
		}
		err = e
		return result()
	}
	defer conn.Release()
	leaseArg := []byte(strconv.FormatInt(lease.Milliseconds(), 10))
	var in map[jobs.Ref]bool // refs as a set, made when needed
	listed := func(ref jobs.Ref) bool {
		if in == nil {
			in = make(map[jobs.Ref]bool, len(refs))
			for _, ref := range refs {
				in[ref] = true
			}
		}
		return in[ref]
	}
	var again []jobs.Ref // the refs of the leases not extended
	var stmts []statement
	own, adopted := splitForeign(fast)
	for lo := 0; lo < len(own); lo += extendChunk {
		stmts = append(stmts, r.extendStatement(own[lo:min(lo+extendChunk, len(own))], false, lease, leaseArg, until, listed, &again, unknownRefs))
	}
	for lo := 0; lo < len(adopted); lo += adoptChunk {
		stmts = append(stmts, r.extendStatement(adopted[lo:min(lo+adoptChunk, len(adopted))], true, lease, leaseArg, until, listed, &again, unknownRefs))
	}
	// The refs of no cached lease: located first (unless the Registry
	// only moves), the jobs in no lease moved at once, so that the leases
	// of another Registry whose every member the heartbeat lists are
	// adopted whole, in a second round trip with the moves of the rest;
	// else moved at once.
	var located map[int64]*locatedLease
	settled := map[jobs.Ref]bool{}
	if len(slow) > 0 && !r.movesOnly {
		located = map[int64]*locatedLease{}
		for lo := 0; lo < len(slow); lo += heartbeatChunk {
			stmts = append(stmts, r.locateStatement(slow[lo:min(lo+heartbeatChunk, len(slow))], leaseArg, until, located, settled, lostRefs, unknownRefs))
		}
	} else {
		for lo := 0; lo < len(slow); lo += heartbeatChunk {
			stmts = append(stmts, r.moveStatement(slow[lo:min(lo+heartbeatChunk, len(slow))], leaseArg, until, &again, lostRefs, unknownRefs))
		}
	}
	err = pipeline(ctx, conn.Conn(), stmts)
	if located != nil {
		adopt, moves := adoption(slow, located, settled, unknownRefs)
		stmts = stmts[:0]
		for lo := 0; lo < len(adopt); lo += adoptChunk {
			stmts = append(stmts, r.adoptStatement(adopt[lo:min(lo+adoptChunk, len(adopt))], leaseArg, until, &again, unknownRefs))
		}
		for lo := 0; lo < len(moves); lo += heartbeatChunk {
			stmts = append(stmts, r.moveStatement(moves[lo:min(lo+heartbeatChunk, len(moves))], leaseArg, until, &again, lostRefs, unknownRefs))
		}
		err = cmp.Or(err, pipeline(ctx, conn.Conn(), stmts))
	}
	// Then the jobs of the leases not extended, and those of the moving
	// statements to send again (a heartbeat of the same jobs at once), a
	// round trip each time, at most 4 times.
	for round := 0; len(again) > 0; round++ {
		moves := again
		slices.SortFunc(moves, func(a, b jobs.Ref) int { return cmp.Or(strings.Compare(a.ID, b.ID), cmp.Compare(a.Epoch, b.Epoch)) })
		moves, again = slices.Compact(moves), nil // a ref moved into two leases by heartbeats at once
		if round == 4 {
			for _, ref := range moves {
				unknownRefs[ref] = true
			}
			err = cmp.Or(err, errors.New("pgjobs: heartbeat: jobs moved by other heartbeats at once, 4 times"))
			break
		}
		stmts = stmts[:0]
		for lo := 0; lo < len(moves); lo += heartbeatChunk {
			stmts = append(stmts, r.moveStatement(moves[lo:min(lo+heartbeatChunk, len(moves))], leaseArg, until, &again, lostRefs, unknownRefs))
		}
		err = cmp.Or(err, pipeline(ctx, conn.Conn(), stmts))
	}
	return result()
}

// statement is one statement of a pipeline, its own transaction: its
// rows are passed to row, then done is called, or failed when it failed
// or its outcome is unknown.
type statement struct {
	sql     string
	args    [][]byte // in the text format
	formats []int16  // of the result columns: 0 text, 1 binary (one for all)
	row     func(values [][]byte) error
	scan    func(row pgx.Row) error // instead of row: the row to scan
	done    func()
	failed  func(err error)
}

// extendStatement extends the leases of fast (another Registry's when
// adopted) that still have the members cached; the refs of the others go
// to again, their leases forgotten.
func (r *Registry) extendStatement(fast []fastLease, adopted bool, lease time.Duration, leaseArg []byte, until time.Time, listed func(jobs.Ref) bool, again *[]jobs.Ref, unknown map[jobs.Ref]bool) statement {
	extended := make(map[int64]bool, len(fast))
	s := r.leaseStatement(fast, adopted, leaseArg, extended)
	s.done = func() { *again = append(*again, r.cache.extended(fast, extended, until, lease, listed)...) }
	s.failed = func(error) {
		r.cache.unextended(fast)
		for _, l := range fast {
			for _, ref := range l.refs {
				if listed(ref) {
					unknown[ref] = true
				}
			}
		}
	}
	return s
}

// adoptStatement extends the leases of adopt, another Registry's, whose
// every member the heartbeat lists (as its locating statements found
// them), and caches those it extended; the refs of the others go to
// again.
func (r *Registry) adoptStatement(adopt []fastLease, leaseArg []byte, until time.Time, again *[]jobs.Ref, unknown map[jobs.Ref]bool) statement {
	extended := make(map[int64]bool, len(adopt))
	s := r.leaseStatement(adopt, true, leaseArg, extended)
	s.done = func() {
		if r.afterAdopt != nil {
			r.afterAdopt()
		}
		for _, l := range adopt {
			if extended[l.id] {
				r.cache.put(l.id, l.counted, until, true)
			} else {
				*again = append(*again, l.counted...)
			}
		}
	}
	s.failed = func(error) {
		for _, l := range adopt {
			for _, ref := range l.counted {
				unknown[ref] = true
			}
		}
	}
	return s
}

// leaseStatement is the statement that extends the leases of fast whole,
// with the refs of each when they are another Registry's (adopted), and
// records the leases it extended in extended; its done and failed are the
// caller's.
func (r *Registry) leaseStatement(fast []fastLease, adopted bool, leaseArg []byte, extended map[int64]bool) statement {
	ids, counts := []byte{'{'}, []byte{'{'}
	var refs []jobs.Ref
	var leases []byte
	for i, l := range fast {
		if i > 0 {
			ids, counts = append(ids, ','), append(counts, ',')
		}
		ids = strconv.AppendInt(ids, l.id, 10)
		counts = strconv.AppendInt(counts, int64(l.n), 10)
		if adopted {
			for _, ref := range l.counted {
				leases = strconv.AppendInt(append(leases, ','), l.id, 10)
				refs = append(refs, ref)
			}
		}
	}
	sql, args := r.q.extend, [][]byte{append(ids, '}'), append(counts, '}'), leaseArg}
	if adopted {
		r.adoptStatements.Add(1)
		refIDs, refEpochs := textArrays(refs)
		if len(leases) > 0 {
			leases[0] = '{'
		} else {
			leases = []byte{'{'}
		}
		sql, args = r.q.adopt, append(args, append(leases, '}'), refIDs, refEpochs)
	} else {
		r.fastStatements.Add(1)
	}
	return statement{
		sql: sql, args: args, formats: []int16{0},
		row: func(v [][]byte) error {
			id, err := strconv.ParseInt(string(v[0]), 10, 64)
			extended[id] = true
			return err
		},
	}
}

// locatedLease is a lease of another Registry that a heartbeat's refs
// are in, as its locating statements found them: its members, and the
// refs in it.
type locatedLease struct {
	members int
	refs    []jobs.Ref
}

// locateStatement moves the jobs of refs that are in no lease into a new
// lease, and finds the leases of the others (those in one) and their
// members, into located; the refs it moved or found lost go to settled
// (lost also to lost): the others are to move, unless adopted.
func (r *Registry) locateStatement(refs []jobs.Ref, leaseArg []byte, until time.Time, located map[int64]*locatedLease, settled, lost, unknown map[jobs.Ref]bool) statement {
	r.locateStatements.Add(1)
	ids, epochs := textArrays(refs)
	found := make([]bool, len(refs))
	var newLease int64
	var moved []jobs.Ref
	return statement{
		sql: r.q.locate, args: [][]byte{ids, epochs, leaseArg}, formats: []int16{0},
		row: func(v [][]byte) error {
			o, err := strconv.Atoi(string(v[0]))
			if err != nil {
				return err
			}
			if o < 1 || o > len(refs) {
				return fmt.Errorf("pgjobs: heartbeat: located place %d of %d", o, len(refs))
			}
			found[o-1] = true
			if v[1] == nil || v[2] == nil {
				return nil // to move
			}
			id, err1 := strconv.ParseInt(string(v[1]), 10, 64)
			n, err2 := strconv.Atoi(string(v[2]))
			if err := cmp.Or(err1, err2); err != nil {
				return err
			}
			if n == 0 { // moved into the new lease
				newLease = id
				moved = append(moved, refs[o-1])
				return nil
			}
			l := located[id]
			if l == nil {
				l = &locatedLease{members: n}
				located[id] = l
			}
			l.refs = append(l.refs, refs[o-1])
			return nil
		},
		done: func() {
			for i, ref := range refs {
				if !found[i] {
					lost[ref], settled[ref] = true, true
					r.cache.forget(ref)
				}
			}
			for _, ref := range moved {
				settled[ref] = true
			}
			if len(moved) > 0 {
				r.cache.put(newLease, moved, until, false)
			}
		},
		failed: func(error) {
			for _, ref := range refs {
				unknown[ref] = true
			}
		},
	}
}

// adoption splits the refs of no cached lease, once located, into the
// leases to adopt (each listed whole, by ID) and the refs to move (in the
// order of slow), leaving out those settled (moved or lost by their
// locating statement) and those of unknown outcome (their locating
// statement failed; a lease with one of them is not adopted).
func adoption(slow []jobs.Ref, located map[int64]*locatedLease, settled, unknown map[jobs.Ref]bool) (adopt []fastLease, moves []jobs.Ref) {
	whole := map[jobs.Ref]bool{}
	for id, l := range located {
		if len(l.refs) != l.members || slices.ContainsFunc(l.refs, func(ref jobs.Ref) bool { return unknown[ref] }) {
			continue
		}
		adopt = append(adopt, fastLease{cachedLease: &cachedLease{id: id}, n: l.members, counted: l.refs})
		for _, ref := range l.refs {
			whole[ref] = true
		}
	}
	slices.SortFunc(adopt, func(a, b fastLease) int { return cmp.Compare(a.id, b.id) })
	for _, ref := range slow {
		if !whole[ref] && !settled[ref] && !unknown[ref] {
			moves = append(moves, ref)
		}
	}
	return adopt, moves
}

// splitForeign splits fast into this Registry's leases and those it
// adopted, in order.
func splitForeign(fast []fastLease) (own, adopted []fastLease) {
	for _, f := range fast {
		if f.foreign {
			adopted = append(adopted, f)
		} else {
			own = append(own, f)
		}
	}
	return own, adopted
}

// moveStatement moves the live jobs of refs into a new lease and records
// the others as lost; refs go to again when the statement must be sent
// again (retry).
func (r *Registry) moveStatement(refs []jobs.Ref, leaseArg []byte, until time.Time, again *[]jobs.Ref, lost, unknown map[jobs.Ref]bool) statement {
	r.slowStatements.Add(1)
	ids, epochs := textArrays(refs)
	var newLease int64
	gone := map[jobs.Ref]bool{}
	return statement{
		sql: r.q.heartbeat, args: [][]byte{ids, epochs, leaseArg}, formats: []int16{0, 1, 0},
		row: func(v [][]byte) error {
			if v[0] != nil {
				n, err := strconv.ParseInt(string(v[0]), 10, 64)
				if err != nil {
					return err
				}
				newLease = n
			}
			if v[1] != nil {
				epoch, err := strconv.ParseUint(string(v[2]), 10, 64)
				if err != nil {
					return err
				}
				gone[jobs.Ref{ID: string(v[1]), Epoch: epoch}] = true // bytea, binary format: the ID's bytes
			}
			return nil
		},
		done: func() {
			var moved []jobs.Ref
			for _, ref := range refs {
				if gone[ref] {
					lost[ref] = true
					r.cache.forget(ref)
				} else {
					moved = append(moved, ref)
				}
			}
			if newLease != 0 && len(moved) > 0 {
				r.cache.put(newLease, moved, until, false)
			}
		},
		failed: func(err error) {
			if retry(err) {
				*again = append(*again, refs...)
				return
			}
			for _, ref := range refs {
				unknown[ref] = true
			}
		},
	}
}

// pipeline sends stmts on conn in one pipeline, a Sync after each (so each
// is a transaction of its own and a failed one leaves the others done),
// and reads their results. A statement is done once its Sync answered
// (its transaction committed: a commit can fail after the statement's
// rows came). A statement that fails on the server fails alone; a failure
// of the connection fails the statement being read and those after it.
// It returns the first error.
func pipeline(ctx context.Context, pc *pgx.Conn, stmts []statement) (err error) {
	if len(stmts) == 0 {
		return nil
	}
	conn := pc.PgConn()
	fail := func(from int, e error) error {
		for _, s := range stmts[from:] {
			s.failed(e)
		}
		return cmp.Or(err, e)
	}
	names, e := prepare(ctx, pc, stmts)
	if e != nil {
		return fail(0, e)
	}
	forgotten := false // a statement named but not prepared on the server
	pipe := conn.StartPipeline(ctx)
	for _, s := range stmts {
		if name, ok := names[s.sql]; ok {
			pipe.SendQueryPrepared(name, s.args, nil, s.formats)
		} else {
			pipe.SendQueryParams(s.sql, s.args, nil, nil, s.formats)
		}
		pipe.SendPipelineSync()
	}
	if e := pipe.Flush(); e != nil {
		_ = pipe.Close()
		return fail(0, e)
	}
	serverError := func(e error) bool {
		var pgErr *pgconn.PgError
		return errors.As(e, &pgErr)
	}
	for i, s := range stmts {
		e := readStatement(pipe, pc.TypeMap(), s)
		var unreadable rowError // the statement's own: the connection reads on
		if e != nil && !serverError(e) && !errors.As(e, &unreadable) {
			_ = pipe.Close()
			return fail(i, e) // the connection: this statement and the rest are unknown
		}
		// The Sync's answer: the statement's transaction commits there, or
		// fails and is rolled back (a deferred constraint, a serialization
		// failure at commit), after its rows came. pgx reads an error in
		// the Sync's place and puts the Sync back: its ReadyForQuery
		// follows.
		if _, se := pipe.GetResults(); se != nil {
			if !serverError(se) {
				_ = pipe.Close()
				return fail(i, se) // committed or not: unknown
			}
			e = cmp.Or(e, se)
			if _, se := pipe.GetResults(); se != nil {
				_ = pipe.Close()
				return fail(i, se)
			}
		}
		if e == nil {
			s.done()
			continue
		}
		// The statement failed on the server: it is unknown (or to be
		// sent again); the next ones (after the Sync) ran.
		s.failed(e)
		if !retry(e) {
			err = cmp.Or(err, e)
		}
		var pgErr *pgconn.PgError
		forgotten = forgotten || errors.As(e, &pgErr) && pgErr.Code == "26000" // invalid_sql_statement_name
	}
	if e := pipe.Close(); e != nil {
		err = cmp.Or(err, e)
	}
	if forgotten {
		// The server forgot a prepared statement (a DISCARD ALL or
		// DEALLOCATE ALL on the connection), which pgx still names: it
		// forgot them all, those of this pipeline and the heartbeat's
		// others. pgx forgets them all too, so that the next statements
		// are prepared again.
		_ = pc.DeallocateAll(ctx)
	}
	return err
}

// prepare returns the names of stmts' statements prepared on pc (once per
// connection: pgx remembers them), when pc's configuration caches
// prepared statements (pgx's default, QueryExecModeCacheStatement), as
// pgx does for the Registry's other statements; else none, and the
// statements are sent unnamed (parsed and planned each time). A prepared
// statement is planned for its first five executions, then (PostgreSQL's
// plan_cache_mode auto) a generic plan is kept when it costs no more:
// planning and parsing were over a third of a heartbeat's server time (a
// heartbeat of 100,000 jobs in no lease took 2.5 s unprepared, 1.5 s
// prepared, BenchmarkJobsScale). On a large table every access path of
// these statements is by primary key, which the generic plan keeps; no
// statement relies on its plan for the order of its locks.
func prepare(ctx context.Context, pc *pgx.Conn, stmts []statement) (map[string]string, error) {
	if pc.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return nil, nil
	}
	names := map[string]string{}
	for _, s := range stmts {
		if _, ok := names[s.sql]; ok {
			continue
		}
		sum := sha256.Sum256([]byte(s.sql))
		name := "leasehold_pgjobs_" + hex.EncodeToString(sum[:8])
		if _, err := pc.Prepare(ctx, name, s.sql); err != nil {
			return nil, err
		}
		names[s.sql] = name
	}
	return names, nil
}

// rowError is a row of a statement that its reader refused: the
// statement's outcome is unknown to its caller, and the pipeline goes on.
type rowError struct{ err error }

func (e rowError) Error() string { return "pgjobs: reading a row: " + e.err.Error() }
func (e rowError) Unwrap() error { return e.err }

// readStatement reads the rows of one statement of a pipeline, decoded by
// tm for a statement that scans them; a row its reader refuses is a
// rowError, once the statement's rows are all read.
func readStatement(pipe *pgconn.Pipeline, tm *pgtype.Map, s statement) error {
	res, err := pipe.GetResults()
	if err != nil {
		return err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("pgjobs: unexpected pipeline result %T", res)
	}
	var rowErr error
	for rr.NextRow() {
		switch {
		case rowErr != nil:
		case s.scan != nil:
			rowErr = s.scan(pipelineRow{tm, rr.FieldDescriptions(), rr.Values()})
		default:
			rowErr = s.row(rr.Values())
		}
	}
	if _, err = rr.Close(); err != nil {
		return err
	}
	if rowErr != nil {
		return rowError{rowErr}
	}
	return nil
}

// pipelineRow is a row of a pipeline's statement, as a pgx.Row.
type pipelineRow struct {
	tm     *pgtype.Map
	fields []pgconn.FieldDescription
	values [][]byte
}

func (r pipelineRow) Scan(dest ...any) error { return pgx.ScanRow(r.tm, r.fields, r.values, dest...) }

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
	if err := retrying(func() error {
		return r.pool.QueryRow(ctx, r.q.done, []byte(ref.ID), int64(ref.Epoch), jobs.DoneWindow.Milliseconds()).Scan(&completed)
	}); err != nil {
		return unavailable("done", err)
	}
	r.cache.forget(ref) // gone, whether it completed now or before
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
	return r.RemoveEach(ctx, []jobs.Ref{ref})[0]
}

// RemoveEach implements jobs.BatchRecoverer: Remove's statement for each
// ref, each its own transaction, in one pipeline on one connection (one
// round trip of wall time; see Bounds in the package doc).
func (r *Registry) RemoveEach(ctx context.Context, refs []jobs.Ref) []error {
	removed := make([]bool, len(refs))
	window := []byte(strconv.FormatInt(jobs.RetryWindow.Milliseconds(), 10))
	errs := r.each(ctx, "remove", refs, func(ref jobs.Ref) error { return jobs.CheckID(ctx, ref.ID) },
		func(i int) statement {
			return statement{sql: r.q.remove, args: [][]byte{byteaText(refs[i].ID), epochText(refs[i]), window}, formats: []int16{0},
				row: func(v [][]byte) error {
					n, err := strconv.ParseInt(string(v[0]), 10, 64)
					removed[i] = n > 0
					return err
				}}
		})
	for i, ref := range refs {
		if errs[i] != nil {
			continue
		}
		r.cache.forget(ref) // gone, whether removed now or before
		if !removed[i] {
			errs[i] = stale(ref)
		}
	}
	return errs
}

// each sends the statement of each ref that check accepts (stmt(i) for
// refs[i]), each its own transaction, in one pipeline on one connection of
// the pool, and those that failed to be sent again (retryMark: a lease
// made meanwhile) once more each round, in five rounds at most. It
// returns each ref's error: check's, or one matching lock.ErrUnavailable
// for a statement that failed or whose outcome is unknown, or nil for a
// statement done.
func (r *Registry) each(ctx context.Context, op string, refs []jobs.Ref, check func(jobs.Ref) error, stmt func(i int) statement) []error {
	errs := make([]error, len(refs))
	var pending []int
	for i, ref := range refs {
		if errs[i] = check(ref); errs[i] == nil {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return errs
	}
	fail := func(err error) []error {
		for _, i := range pending {
			errs[i] = unavailable(op, err)
		}
		return errs
	}
	if err := r.ensure(ctx); err != nil {
		return fail(err)
	}
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return fail(err)
	}
	defer conn.Release()
	for round := 0; len(pending) > 0; round++ {
		stmts := make([]statement, len(pending))
		for k, i := range pending {
			stmts[k] = stmt(i)
			stmts[k].done = func() { errs[i] = nil }
			stmts[k].failed = func(err error) { errs[i] = err }
		}
		_ = pipeline(ctx, conn.Conn(), stmts) // each statement's outcome is its own
		again := pending[:0]
		for _, i := range pending {
			if retry(errs[i]) && round < 4 {
				again = append(again, i)
			} else if errs[i] != nil {
				errs[i] = unavailable(op, errs[i])
			}
		}
		pending = again
	}
	return errs
}

// byteaText is id as a bytea in text format; epochText is ref's epoch as a
// bigint in text format.
func byteaText(id string) []byte {
	return hex.AppendEncode([]byte(`\x`), []byte(id))
}

func epochText(ref jobs.Ref) []byte { return strconv.AppendInt(nil, int64(ref.Epoch), 10) }

// Expired implements jobs.Registry: one SELECT … WHERE deadline <= now()
// ORDER BY deadline, id LIMIT per page of listChunk (500) rows, each two
// range scans from the page before's last row (the jobs in no lease by
// their deadline, the expired leases by theirs with their members),
// merged: its cost grows with the expired count, not the tracked count
// (0: all). 100 expired jobs are one round trip.
func (r *Registry) Expired(ctx context.Context, limit int) ([]jobs.Job, error) {
	return r.list(ctx, r.q.expired, limit, true)
}

// InFlight implements jobs.Inspector: pages of listChunk (500) tracked
// jobs in deadline order, one SELECT each, up to limit (0: all), of every
// column but the payload: the payloads never leave the server.
func (r *Registry) InFlight(ctx context.Context, limit int) ([]jobs.Job, error) {
	return r.list(ctx, r.q.inflight, limit, false)
}

// listChunk is the most rows one listing statement returns (a page of
// Expired, InFlight or Dead): a page of Expired, whose jobs come whole,
// takes the server about 1.5 ms (one of 1,000 took 3–5 ms, measured with
// bench BenchmarkJobsScale/postgres/recover's pg_stat_statements).
var listChunk = 500

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

// Reclaim implements jobs.Registry: one statement updates the row of
// ref's epoch whose deadline (its lease's, whose row it locks first with
// the check: see the package doc) has passed (server time): a new epoch,
// Attempt+1, owner by, a deadline of its own and a history entry, out of
// its lease; else jobs.ErrStale.
func (r *Registry) Reclaim(ctx context.Context, ref jobs.Ref, by string, lease time.Duration) (jobs.Job, error) {
	got := r.ReclaimEach(ctx, []jobs.Ref{ref}, by, lease)[0]
	return got.Job, got.Err
}

// ReclaimEach implements jobs.BatchRecoverer: Reclaim's statement for each
// ref, each its own transaction, in one pipeline on one connection (one
// round trip of wall time; see Bounds in the package doc).
func (r *Registry) ReclaimEach(ctx context.Context, refs []jobs.Ref, by string, lease time.Duration) []jobs.Reclaimed {
	out := make([]jobs.Reclaimed, len(refs))
	got := make([]bool, len(refs))
	leaseArg := []byte(strconv.FormatInt(lease.Milliseconds(), 10))
	errs := r.each(ctx, "reclaim", refs, func(ref jobs.Ref) error { return jobs.CheckReclaim(ctx, ref, by, lease) },
		func(i int) statement {
			return statement{sql: r.q.reclaim, args: [][]byte{byteaText(refs[i].ID), epochText(refs[i]), []byte(by), leaseArg}, formats: []int16{1},
				scan: func(row pgx.Row) (err error) {
					out[i].Job, err = scanJob(row, true)
					got[i] = err == nil
					return err
				}}
		})
	for i, ref := range refs {
		switch {
		case errs[i] != nil:
			out[i] = jobs.Reclaimed{Err: errs[i]}
		case !got[i]:
			out[i] = jobs.Reclaimed{Err: stale(ref)}
		default:
			r.cache.forget(ref)
		}
	}
	return out
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
	var tag pgconn.CommandTag
	err := retrying(func() (err error) {
		tag, err = r.pool.Exec(ctx, r.q.bury, []byte(ref.ID), int64(ref.Epoch), reason)
		return err
	})
	if err == nil {
		r.cache.forget(ref) // gone, whether buried now or before
	}
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

// Dead implements jobs.Inspector: one SELECT per page of listChunk (500)
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
	return r.purge(ctx, id, nil)
}

// PurgeBurial implements jobs.BurialPurger: Purge of the dead job ref.ID
// when it was buried at epoch ref.Epoch (the same statement checks the
// dead row's epoch), else jobs.ErrNotFound.
func (r *Registry) PurgeBurial(ctx context.Context, ref jobs.Ref) error {
	epoch := int64(ref.Epoch) // as Done's and Remove's
	return r.purge(ctx, ref.ID, &epoch)
}

// purge deletes the dead job id, buried at *epoch unless epoch is nil.
func (r *Registry) purge(ctx context.Context, id string, epoch *int64) error {
	if err := jobs.CheckID(ctx, id); err != nil {
		return err
	}
	if err := r.ensure(ctx); err != nil {
		return err
	}
	var n int64
	err := r.pool.QueryRow(ctx, r.q.purge, []byte(id), epoch).Scan(&n)
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
