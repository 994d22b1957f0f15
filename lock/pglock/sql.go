package pglock

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// The statements. Every operation on a grant is one of them, sent as one
// round trip, prepared once per connection (Lock.prepare; the rest through
// pgx's statement cache).
//
// Lock ids are the 64-bit keys of pg_try_advisory_lock(bigint); pg_locks
// shows them as classid (high 32 bits) and objid (low 32 bits) with
// objsubid 1, so ((classid::int8 << 32) | objid::int8) is the id again.
// A waiter's interest in a key is a shared lock on the same 64 bits in the
// other advisory space, pg_advisory_lock_shared(int4, int4) (objsubid 2).
//
// A holding session's application_name is "<token> <ttl ms> <since> <owner>"
// (since: the grant's server time in Unix ms): the only per-session text
// another session can read without a write. The server keeps 63 bytes of
// it, so a long owner is cut.

const lockID = `((l.classid::int8 << 32) | l.objid::int8)`

// remaining is the remaining ttl in ms of the idle holder session s, as the
// server's idle_session_timeout counts it; NULL when unknown. Any session
// that holds the lock can set its application_name: only a ttl that fits
// in bigint (at most 18 digits) is cast, so that no value makes the
// statement fail.
const remaining = `CASE WHEN s.application_name ~ '^[0-9]+ [0-9]{1,18} ' AND s.state = 'idle'
		THEN GREATEST(0, split_part(s.application_name, ' ', 2)::int8
			- (extract(epoch FROM clock_timestamp() - s.state_change) * 1000)::int8) END`

// holders joins the granted locks of this database on pg_stat_get_activity
// (a function, so that no shared catalog is locked: it works while the
// lock table is full).
const holders = `pg_locks l JOIN pg_stat_get_activity(NULL) s ON s.pid = l.pid
	WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
	  AND l.database = (SELECT datid FROM pg_stat_get_activity(pg_backend_pid()))`

type statements struct {
	acquire              [3]string // [0] one key, [1] several, [2] one key, queued
	acquireRegister      [2]string // [0] one key, [1] several; never queued (see AcquireQueued)
	extend, release      string
	inspect, list, force string
	waiting, claim       string
	visit                string
	setupCheck           string
	setup                []string
}

func buildStatements(schema string, serverMajor int) statements {
	seq := qualified(schema, "leasehold_tokens")
	keys := qualified(schema, "leasehold_keys")
	claims := qualified(schema, "leasehold_claims")
	incarnations := qualified(schema, "leasehold_incarnations")
	// A live claim as a holder row: "<token> <ttl ms> <since ms> <owner>"
	// and its remaining ttl in ms (see Claim).
	claimRow := `c.token || ' ' || c.ttl_ms || ' ' || (extract(epoch FROM c.since) * 1000)::int8 || ' ' || c.owner,
	GREATEST(0, (extract(epoch FROM c.until - clock_timestamp()) * 1000)::int8)`
	// fn reports the shortest remaining ttl of the holders of some ids. A
	// function, so that the acquire statements' plans stay small: every run
	// initialises its whole plan, and the join on pg_locks would cost more
	// than the rest of an acquire; PL/pgSQL plans the query once per session.
	// v2: v1 cast a ttl of any length (see remaining); v1 is no longer used.
	fn := qualified(schema, "leasehold_remaining_v2")
	// $1 the id (one key) or ids, $2 the backend pid the client was told,
	// $3 pooler allowed, $4 ttl setting name, $5 ttl ms, $6 owner, [$7 the
	// key name or names, $8 namespace].
	//
	// Every acquire statement returns two columns: the backend pid, and
	// what happened as text:
	//
	//   - NULL: nothing was tried, the session is not the one the client
	//     connected to (see ErrPooler);
	//   - "h<ms>": no key was free; <ms> is the shortest remaining ttl of
	//     their holders, empty when unknown;
	//   - "<idx> <µs> <application_name>": the key at 1-based index idx
	//     was granted, µs after the statement started (the server's clock:
	//     the ttl counts from the statement's end, which is at least that
	//     long after the request was sent), with the application_name
	//     "<token> <ttl ms> <since> <owner>" the session now has.
	//
	// One text column instead of a row of typed ones keeps the statement
	// flat: one CASE, evaluated in order, needs no CTE to run the lock
	// before the token, and the client reads it without allocating. The
	// statements for one key take scalars, not arrays: with nothing in the
	// parameters to change the planner's estimates, the server keeps the
	// prepared statement's generic plan instead of planning every run
	// anew, which costs more than the rest of the work. The hint is a
	// function (see fn) called only when nothing was granted.
	grant := `(date_part('epoch', clock_timestamp() - statement_timestamp()) * 1000000)::int8
		|| ' ' || left(set_config($4::text, $5::text, false), 0)
		|| set_config('application_name', nextval('` + seq + `'::regclass) || ' ' || $5::text || ' '
			|| (date_part('epoch', clock_timestamp()) * 1000)::int8 || ' ' || $6::text, false)`
	sameSession := `($3::bool OR pg_backend_pid() = $2::int4)`
	hint := func(ids string) string { return `'h' || COALESCE(` + fn + `(` + ids + `)::text, '')` }
	// one tries one key; queued waits in the server's queue for it
	// (pg_advisory_lock returns void, never NULL: the test only orders the
	// wait before the grant).
	one := `SELECT pg_backend_pid(), CASE WHEN NOT ` + sameSession + ` THEN NULL
	WHEN pg_try_advisory_lock($1::int8) THEN '1 ' || ` + grant + `
	ELSE ` + hint(`ARRAY[$1::int8]`) + ` END`
	queued := `SELECT pg_backend_pid(), CASE WHEN NOT ` + sameSession + ` THEN NULL
	WHEN pg_advisory_lock($1::int8) IS NOT NULL THEN '1 ' || ` + grant + `
	ELSE 'h' END`
	// several takes the first free of the keys with a recursive CTE that
	// stops at the first success.
	several := func(reg string) string {
		return `WITH RECURSIVE r(i, got) AS (
	SELECT 0, false
	UNION ALL
	SELECT i + 1, pg_try_advisory_lock(($1::int8[])[i + 1]) FROM r
	 WHERE NOT got AND i < cardinality($1::int8[])
), ` + reg + `a AS MATERIALIZED (
	SELECT CASE WHEN ` + sameSession + ` THEN COALESCE((SELECT i FROM r WHERE got), 0) END AS idx
)
SELECT pg_backend_pid(), CASE WHEN idx IS NULL THEN NULL
	WHEN idx > 0 THEN idx || ' ' || ` + grant + `
	ELSE ` + hint(`$1::int8[]`) + ` END FROM a`
	}
	// register records the key names (List), the first time an instance
	// uses them: a data-modifying CTE runs whether or not it is read.
	register := func(ids, names string) string {
		return `reg AS (
	INSERT INTO ` + keys + ` (id, namespace, key)
	SELECT u.id, $8::text, u.key FROM (SELECT ` + ids + ` AS id, ` + names + ` AS key) AS u
	ON CONFLICT (id) DO NOTHING
), `
	}
	terminate := "pg_terminate_backend(l.pid)"
	if serverMajor >= 14 {
		terminate = "pg_terminate_backend(l.pid, 5000)" // waits until the session is gone
	}
	return statements{
		acquire: [3]string{one, several(""), queued},
		acquireRegister: [2]string{
			`WITH ` + strings.TrimSuffix(register(`$1::int8`, `$7::bytea`), ", ") + "\n" + one,
			several(register(`unnest($1::int8[])`, `unnest($7::bytea[])`)),
		},
		// $1 pid at acquire, $2 id, $3 ttl setting, $4 ttl ms, $5 and $6
		// the application_name before and after the ttl. NULL: the session
		// does not hold the lock.
		extend: `SELECT CASE WHEN pg_backend_pid() = $1::int4 AND EXISTS (
		SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
		   AND l.pid = pg_backend_pid() AND ` + lockID + ` = $2::int8)
	THEN left(set_config($3::text, $4::text, false), 0)
		|| set_config('application_name', $5::text || $4::text || $6::text, false) END`,
		// $1 id, $2 ttl setting, $3 its value outside grants,
		// $4 and $5 the interest lock, $6 channel, $7 payload. NULL: the
		// session did not hold the lock; else "n" when waiters were
		// notified, "r" when there were none.
		//
		// The unlock comes last, so that once the next waiter in the
		// server's queue is granted, the releasing session has only its
		// commit left to compete with it for a CPU. Checking the interest
		// first misses no waiter: the exclusive xact lock taken when there
		// is none is held to the commit, after the unlock, so a waiter
		// that takes its interest meanwhile waits for the commit, and its
		// attempt after that finds the key free. The NOTIFY goes out at
		// the commit either way.
		release: `SELECT left(set_config($2::text, $3::text, false), 0) || CASE
	WHEN pg_try_advisory_xact_lock($4::int4, $5::int4) THEN CASE WHEN pg_advisory_unlock($1::int8) THEN 'r' END
	WHEN pg_advisory_unlock($1::int8) THEN CASE WHEN pg_notify($6::text, $7::text) IS NOT NULL THEN 'n' END END`,
		// $1 id: the sessions waiting in the server's queue for the lock.
		waiting: `SELECT count(*) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND NOT l.granted
	AND l.database = (SELECT datid FROM pg_stat_get_activity(pg_backend_pid())) AND ` + lockID + ` = $1::int8`,
		inspect: `SELECT s.application_name, ` + remaining + ` FROM ` + holders + ` AND ` + lockID + ` = $1::int8
UNION ALL SELECT ` + claimRow + ` FROM ` + claims + ` c WHERE c.id = $1::int8 AND c.until > clock_timestamp()`,
		// $1 id, $2 namespace, $3 key, $4 owner, $5 ttl ms. Takes the claim
		// when there is none or it lapsed (no row back: claimed), and
		// deletes a few lapsed claims of other keys on the way, so the
		// table holds about the live claims.
		claim: `WITH gc AS (
	DELETE FROM ` + claims + ` WHERE id IN (SELECT id FROM ` + claims + ` WHERE until < clock_timestamp() AND id <> $1::int8
		ORDER BY until LIMIT 8 FOR UPDATE SKIP LOCKED)
)
INSERT INTO ` + claims + ` AS c (id, namespace, key, owner, token, ttl_ms, since, until)
VALUES ($1::int8, $2::text, $3::bytea, $4::text, nextval('` + seq + `'), $5::int8, clock_timestamp(),
	clock_timestamp() + $5::int8 * interval '1 millisecond')
ON CONFLICT (id) DO UPDATE SET namespace = EXCLUDED.namespace, key = EXCLUDED.key, owner = EXCLUDED.owner,
	token = EXCLUDED.token, ttl_ms = EXCLUDED.ttl_ms, since = EXCLUDED.since, until = EXCLUDED.until
	WHERE c.until <= clock_timestamp()
RETURNING token`,
		list: `SELECT k.key, s.application_name, ` + remaining + `
FROM ` + keys + ` k, ` + holders + ` AND ` + lockID + ` = k.id
  AND k.namespace = $1::text AND substring(k.key FROM 1 FOR octet_length($2::bytea)) = $2::bytea
UNION ALL SELECT c.key, ` + claimRow + ` FROM ` + claims + ` c
WHERE c.namespace = $1::text AND substring(c.key FROM 1 FOR octet_length($2::bytea)) = $2::bytea
  AND c.until > clock_timestamp()`,
		// $1 id, $2 channel, $3 payload.
		force: `WITH x AS MATERIALIZED (SELECT count(` + terminate + `) AS n FROM ` + holders + ` AND ` + lockID + ` = $1::int8)
SELECT n, CASE WHEN n > 0 THEN pg_notify($2::text, $3::text) END FROM x`,
		// $1 ttl ms. Records that this server incarnation (its
		// postmaster's start time) was seen and that grants of up to $1 ms
		// are made in it, and returns the ttl recorded for it and how long
		// (ms) its quarantine still runs: the end of the last grant an
		// earlier incarnation may have made, each counted from the first
		// sighting of its successor (see quarantine.go).
		visit: `WITH me AS (
	INSERT INTO ` + incarnations + ` AS i (started, first_seen, ttl_ms)
	VALUES (pg_postmaster_start_time(), clock_timestamp(), $1::int8)
	ON CONFLICT (started) DO UPDATE SET ttl_ms = GREATEST(i.ttl_ms, EXCLUDED.ttl_ms)
	RETURNING i.first_seen, i.ttl_ms
)
SELECT me.ttl_ms, COALESCE((
	SELECT (extract(epoch FROM max(COALESCE(s.next_seen, me.first_seen) + s.ttl_ms * interval '1 millisecond')
		- clock_timestamp()) * 1000)::int8
	FROM (SELECT p.ttl_ms, lead(p.first_seen) OVER (ORDER BY p.first_seen) AS next_seen
		FROM ` + incarnations + ` p WHERE p.started <> pg_postmaster_start_time() AND p.first_seen < me.first_seen) s
), 0)
FROM me`,
		setupCheck: `SELECT current_setting('server_version_num')::int,
	current_setting('idle_session_timeout', true),
	to_regclass('` + seq + `') IS NOT NULL AND to_regclass('` + keys + `') IS NOT NULL
	AND to_regclass('` + claims + `') IS NOT NULL AND to_regclass('` + incarnations + `') IS NOT NULL
	AND to_regprocedure('` + fn + `(bigint[])') IS NOT NULL`,
		setup: []string{
			`CREATE SEQUENCE IF NOT EXISTS ` + seq + ` AS bigint MINVALUE 1`,
			`CREATE TABLE IF NOT EXISTS ` + keys + ` (id bigint PRIMARY KEY, namespace text NOT NULL, key bytea NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS ` + claims + ` (id bigint PRIMARY KEY, namespace text NOT NULL, key bytea NOT NULL,
	owner text NOT NULL, token bigint NOT NULL, ttl_ms bigint NOT NULL, since timestamptz NOT NULL, until timestamptz NOT NULL)`,
			`CREATE INDEX IF NOT EXISTS leasehold_claims_until ON ` + claims + ` (until)`,
			`CREATE TABLE IF NOT EXISTS ` + incarnations + ` (started timestamptz PRIMARY KEY,
	first_seen timestamptz NOT NULL, ttl_ms bigint NOT NULL)`,
			`CREATE FUNCTION ` + fn + `(ids bigint[]) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
BEGIN
	RETURN (SELECT min(` + remaining + `) FROM ` + holders + ` AND ` + lockID + ` = ANY(ids));
END
$fn$`,
		},
	}
}

// SetupStatements returns the statements Setup runs to create the
// sequence, the table and the function pglock uses, in schema ("" for the
// search_path), for a DBA to run with a role that may create them.
func SetupStatements(schema string) []string {
	return buildStatements(schema, 0).setup
}

// qualified returns schema.name quoted, or name alone (found through the
// search_path) when schema is empty. The result is also safe inside a
// string literal: identifiers are checked in WithSchema.
func qualified(schema, name string) string {
	if schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{schema, name}.Sanitize()
}

func validSchema(s string) bool {
	return s != "" && len(s) < 64 && !strings.ContainsAny(s, "'\"\x00")
}
