package pglock

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold-go/leasehold/lock"
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
	acquire               [3]string // [0] one key, [1] several, [2] one key, queued
	acquireRegister       [2]string // [0] one key, [1] several; never queued (see AcquireQueued)
	shared                [2]string // one key shared: [0] plain, [1] registering its name
	all                   [2]string // every key of a group: [0] plain, [1] registering their names
	extend, release       string
	releaseShared         string
	extendAll, releaseAll string
	inspect, list, force  string
	waiting, claim        string
	visit                 string
	setupCheck            string
	batch                 batchStatements
	claimEach             string
	setup                 []string
}

// batchStatements are the statements of a batch's sessions (batch.go).
type batchStatements struct {
	acquire                             [2]string // [0] plain, [1] registering the key's name
	release, renew, unlock, plainUnlock string
	clean, drop                         string
}

func buildStatements(schema string, serverMajor int) statements {
	seq := qualified(schema, "leasehold_tokens")
	keys := qualified(schema, "leasehold_keys")
	claims := qualified(schema, "leasehold_claims")
	incarnations := qualified(schema, "leasehold_incarnations")
	groups := qualified(schema, "leasehold_group_keys")
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
	// refused is fn for a refused exclusive attempt, which also marks the
	// ids that are held shared as wanted by a writer for lock.IntentTTL
	// (table intents): TryAcquireShared is refused while the mark lives.
	refused := qualified(schema, "leasehold_refused_v1")
	intents := qualified(schema, "leasehold_intents")
	intentMS := strconv.FormatInt(lock.IntentTTL.Milliseconds(), 10)
	// intent is the remaining ms of the live writer's mark on $1, NULL
	// when there is none.
	intent := `(SELECT (extract(epoch FROM i.until - clock_timestamp()) * 1000)::int8 FROM ` + intents + ` i
		WHERE i.id = $1::int8 AND i.until > clock_timestamp())`
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
	grantWith := func(token string) string {
		return `(date_part('epoch', clock_timestamp() - statement_timestamp()) * 1000000)::int8
		|| ' ' || left(set_config($4::text, $5::text, false), 0)
		|| set_config('application_name', ` + token + ` || ' ' || $5::text || ' '
			|| (date_part('epoch', clock_timestamp()) * 1000)::int8 || ' ' || $6::text, false)`
	}
	grant := grantWith(`nextval('` + seq + `'::regclass)`)
	sameSession := `($3::bool OR pg_backend_pid() = $2::int4)`
	hint := func(ids string) string { return `'h' || COALESCE(` + fn + `(` + ids + `)::text, '')` }
	hintRefused := `'h' || COALESCE(` + refused + `(ARRAY[$1::int8], ` + intentMS + `)::text, '')`
	// one tries one key; queued waits in the server's queue for it
	// (pg_advisory_lock returns void, never NULL: the test only orders the
	// wait before the grant).
	// (oneShared takes a shared grant of it unless a writer's mark lives.)
	one := `SELECT pg_backend_pid(), CASE WHEN NOT ` + sameSession + ` THEN NULL
	WHEN pg_try_advisory_lock($1::int8) THEN '1 ' || ` + grant + `
	ELSE ` + hintRefused + ` END`
	oneShared := `SELECT pg_backend_pid(), CASE WHEN NOT ` + sameSession + ` THEN NULL
	WHEN ` + intent + ` IS NOT NULL THEN 'h' || ` + intent + `
	WHEN pg_try_advisory_lock_shared($1::int8) THEN '1 ' || ` + grant + `
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
	// uses them: a data-modifying CTE runs whether or not it is read. It
	// inserts them in ID order: an insert waits for another transaction
	// that inserted the same ID, and TryAcquireAny rotates its keys, so
	// two first uses of one set in two orders deadlocked (40P01).
	register := func(ids, names string) string {
		return `reg AS (
	INSERT INTO ` + keys + ` (id, namespace, key)
	SELECT u.id, $8::text, u.key FROM (SELECT ` + ids + ` AS id, ` + names + ` AS key) AS u ORDER BY u.id
	ON CONFLICT (id) DO NOTHING
), `
	}
	// all takes every key of a group ($1: their ids, sorted) or none: a
	// recursive CTE tries them in order and stops at the first that is
	// held (bad, its 1-based index; 0 when every one was taken); u unlocks
	// those taken before it, t draws a token per key, ins records the
	// tokens and the group for Inspect and List (keyed by the session:
	// rows of an ended session no longer match its backend_start). The
	// reply is "<tokens, comma-separated> <µs> <application_name>" when
	// granted, whose token is the group's first; "h<bad> <ms>" when key
	// bad is held, <ms> the longest remaining ttl of the other sessions
	// holding keys of the set (empty when some is unknown).
	all := func(reg string) string {
		return `WITH RECURSIVE r(i, got) AS (
	SELECT 0, true
	UNION ALL
	SELECT i + 1, pg_try_advisory_lock(($1::int8[])[i + 1]) FROM r
	 WHERE got AND i < cardinality($1::int8[])
), ` + reg + `a AS MATERIALIZED (
	SELECT CASE WHEN ` + sameSession + ` THEN (SELECT CASE WHEN bool_and(got) THEN 0 ELSE max(i) END FROM r) END AS bad
), u AS MATERIALIZED (
	SELECT count(pg_advisory_unlock(($1::int8[])[g])) AS n FROM a, generate_series(1, a.bad - 1) g WHERE a.bad > 0
), t AS MATERIALIZED (
	SELECT array_agg(nextval('` + seq + `'::regclass) ORDER BY g) AS toks
	FROM a, generate_series(1, cardinality($1::int8[])) g WHERE a.bad = 0
), ins AS (
	INSERT INTO ` + groups + ` AS x (pid, started, id, token, grp)
	SELECT pg_backend_pid(), (SELECT backend_start FROM pg_stat_get_activity(pg_backend_pid())), k.id, k.token, t.toks[1]
	FROM t, unnest($1::int8[], t.toks) AS k(id, token) WHERE t.toks IS NOT NULL
	ON CONFLICT (pid, id) DO UPDATE SET started = EXCLUDED.started, token = EXCLUDED.token, grp = EXCLUDED.grp
)
SELECT pg_backend_pid(), CASE WHEN a.bad IS NULL OR u.n IS NULL THEN NULL
	WHEN a.bad = 0 THEN array_to_string(t.toks, ',') || ' ' || ` + grantWith(`t.toks[1]`) + `
	ELSE 'h' || a.bad || ' ' || left(COALESCE(` + refused + `($1::int8[], ` + intentMS + `)::text, ''), 0) || COALESCE((SELECT CASE WHEN bool_and(h.rem IS NOT NULL) THEN max(h.rem) END
		FROM (SELECT ` + remaining + ` AS rem FROM ` + holders + ` AND ` + lockID + ` = ANY($1::int8[])
			AND l.pid <> pg_backend_pid()) h)::text, '') END
FROM a, t, u`
	}
	// A group's extend and release: as one key's, over every id.
	heldAll := `(SELECT count(*) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
		   AND l.pid = pg_backend_pid() AND ` + lockID + ` = ANY($2::int8[])) = cardinality($2::int8[])`
	heldOne := `EXISTS (
		SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
		   AND l.pid = pg_backend_pid() AND ` + lockID + ` = $2::int8)`
	extend := func(held string) string {
		return `SELECT CASE WHEN pg_backend_pid() = $1::int4 AND ` + held + `
	THEN left(set_config($3::text, $4::text, false), 0)
		|| set_config('application_name', $5::text || $4::text || $6::text, false) END`
	}
	release := func(unlock string) string {
		return `SELECT left(set_config($2::text, $3::text, false), 0) || CASE
	WHEN pg_try_advisory_xact_lock($4::int4, $5::int4) THEN CASE WHEN ` + unlock + `($1::int8) THEN 'r' END
	WHEN ` + unlock + `($1::int8) THEN CASE WHEN pg_notify($6::text, $7::text) IS NOT NULL THEN 'n' END END`
	}
	// (A group holds one session's locks: only this statement's keys.
	// The notifications go out first, as for one key. It deletes the
	// session's rows of leasehold_group_keys, and a few left by sessions
	// that ended without a release.)
	releaseAll := `WITH w AS MATERIALIZED (
	SELECT count(pg_notify($6::text, k.p)) AS n FROM unnest($4::int4[], $5::int4[], $7::text[]) AS k(hi, lo, p)
	WHERE NOT pg_try_advisory_xact_lock(k.hi, k.lo)
), d AS (
	DELETE FROM ` + groups + ` WHERE pid = pg_backend_pid() OR (pid, id) IN (
		SELECT x.pid, x.id FROM ` + groups + ` x WHERE NOT EXISTS (
			SELECT 1 FROM pg_stat_get_activity(x.pid) s WHERE s.backend_start = x.started)
		LIMIT 8 FOR UPDATE SKIP LOCKED)
)
SELECT left(set_config($2::text, $3::text, false), 0)
	|| (SELECT count(*) FILTER (WHERE pg_advisory_unlock(k.id)) FROM unnest($1::int8[]) AS k(id)) FROM w`
	// grantOf reads a holder's token and group from the groups table, as
	// "<token> <group>", NULL for a grant of one key.
	grantOf := `(SELECT g.token || ' ' || g.grp FROM ` + groups + ` g
		WHERE g.pid = l.pid AND g.id = ` + lockID + ` AND g.started = s.backend_start)`
	// A batch's session (batch.go) holds many keys: their tokens are rows
	// of the groups table with grp 0 (no group), as a group's keys are,
	// for Inspect and List; the session's application_name carries its
	// ttl and owner. batchAcquire is one's statement that also records the
	// token: $1 to $6 [$7, $8] as one's.
	batchAcquire := func(reg string) string {
		return `WITH ` + reg + `t AS MATERIALIZED (
	SELECT CASE WHEN NOT ` + sameSession + ` THEN NULL
		WHEN pg_try_advisory_lock($1::int8) THEN nextval('` + seq + `'::regclass) ELSE 0 END AS tok
), ins AS (
	INSERT INTO ` + groups + ` AS x (pid, started, id, token, grp)
	SELECT pg_backend_pid(), (SELECT backend_start FROM pg_stat_get_activity(pg_backend_pid())), $1::int8, t.tok, 0
	FROM t WHERE t.tok > 0
	ON CONFLICT (pid, id) DO UPDATE SET started = EXCLUDED.started, token = EXCLUDED.token, grp = EXCLUDED.grp
)
SELECT pg_backend_pid(), CASE WHEN t.tok IS NULL THEN NULL
	WHEN t.tok > 0 THEN '1 ' || ` + grantWith(`t.tok`) + `
	ELSE ` + hintRefused + ` END FROM t`
	}
	batch := batchStatements{
		acquire: [2]string{batchAcquire(""), batchAcquire(register(`$1::int8`, `$7::bytea`))},
		// As release, deleting the key's token row; $3 is the session's
		// ttl, which stays.
		release: `WITH d AS (DELETE FROM ` + groups + ` WHERE pid = pg_backend_pid() AND id = $1::int8)
` + release("pg_advisory_unlock"),
		// $1 the pid at open, $2 ttl setting, $3 ttl ms, $4
		// application_name: NULL when the session is another; and the ids
		// this session holds (its rows of pg_locks).
		renew: `SELECT CASE WHEN pg_backend_pid() = $1::int4
	THEN left(set_config($2::text, $3::text, false), 0) || set_config('application_name', $4::text, false) END,
	ARRAY(SELECT ` + lockID + ` FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
		AND l.pid = pg_backend_pid())`,
		// $1 ids (at most batchChunk), $2 channel, $3 their payloads:
		// unlocks them, deletes their token rows and notifies their
		// waiters (the session's application_name tells a waiter the
		// session's ttl, not how long an unrenewed key has left); the
		// count unlocked.
		unlock: `WITH d AS (DELETE FROM ` + groups + ` WHERE pid = pg_backend_pid() AND id = ANY($1::int8[])),
u AS MATERIALIZED (SELECT k.p FROM unnest($1::int8[], $3::text[]) AS k(id, p) WHERE pg_advisory_unlock(k.id))
SELECT count(pg_notify($2::text, u.p)) FROM u`,
		// $1 ids: unlocks them and nothing else (see session.plainUnlock).
		plainUnlock: `SELECT count(*) FILTER (WHERE pg_advisory_unlock(k)) FROM unnest($1::int8[]) AS k`,
		// At a session's start: deletes the token rows of at most
		// batchChunk keys of sessions that ended without a release, and
		// returns the session's pid.
		clean: `WITH d AS (DELETE FROM ` + groups + ` WHERE (pid, id) IN (
	SELECT x.pid, x.id FROM ` + groups + ` x WHERE NOT EXISTS (
		SELECT 1 FROM pg_stat_get_activity(x.pid) s WHERE s.backend_start = x.started)
	LIMIT ` + strconv.Itoa(batchChunk) + ` FOR UPDATE SKIP LOCKED))
SELECT pg_backend_pid()`,
		// At Close: this session's token rows.
		drop: `DELETE FROM ` + groups + ` WHERE pid = pg_backend_pid()`,
	}
	// claimEach is claim over a chunk: $1 ids (distinct), $2 keys, $3 ttl
	// ms, $4 namespace, $5 owner; a row (id, token) per claim taken. The
	// rows are inserted in the order of their ids, so that two concurrent
	// chunks lock their conflicting rows in one order and never deadlock.
	claimEach := `WITH gc AS (
	DELETE FROM ` + claims + ` WHERE id IN (SELECT id FROM ` + claims + ` WHERE until < clock_timestamp() AND id <> ALL($1::int8[])
		ORDER BY until LIMIT 8 FOR UPDATE SKIP LOCKED)
), ins AS (
	INSERT INTO ` + claims + ` AS c (id, namespace, key, owner, token, ttl_ms, since, until)
	SELECT r.id, $4::text, r.key, $5::text, nextval('` + seq + `'), r.ttl, clock_timestamp(),
		clock_timestamp() + r.ttl * interval '1 millisecond'
	FROM unnest($1::int8[], $2::bytea[], $3::int8[]) AS r(id, key, ttl) ORDER BY r.id
	ON CONFLICT (id) DO UPDATE SET namespace = EXCLUDED.namespace, key = EXCLUDED.key, owner = EXCLUDED.owner,
		token = EXCLUDED.token, ttl_ms = EXCLUDED.ttl_ms, since = EXCLUDED.since, until = EXCLUDED.until
		WHERE c.until <= clock_timestamp()
	RETURNING c.id, c.token
)
SELECT id, token FROM ins`
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
		shared: [2]string{
			oneShared,
			`WITH ` + strings.TrimSuffix(register(`$1::int8`, `$7::bytea`), ", ") + "\n" + oneShared,
		},
		all: [2]string{all(""), all(register(`unnest($1::int8[])`, `unnest($7::bytea[])`))},
		// $1 pid at acquire, $2 id, $3 ttl setting, $4 ttl ms, $5 and $6
		// the application_name before and after the ttl. NULL: the session
		// does not hold the lock.
		extend: extend(heldOne),
		// extendAll: as extend, $2 the group's ids.
		extendAll: extend(heldAll),
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
		release:       release("pg_advisory_unlock"),
		releaseShared: release("pg_advisory_unlock_shared"),
		batch:         batch,
		claimEach:     claimEach,
		// releaseAll: $1 the ids, $2 and $3 as release, $4 and $5 the
		// interest locks (arrays), $6 channel, $7 payloads. The count of
		// locks it released.
		releaseAll: releaseAll,
		// $1 id: the sessions waiting in the server's queue for the lock.
		waiting: `SELECT count(*) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND NOT l.granted
	AND l.database = (SELECT datid FROM pg_stat_get_activity(pg_backend_pid())) AND ` + lockID + ` = $1::int8`,
		// inspect and list: application_name, remaining ttl, shared, and
		// the token and group of a group's key.
		inspect: `SELECT s.application_name, ` + remaining + `, l.mode = 'ShareLock', ` + grantOf + `
FROM ` + holders + ` AND ` + lockID + ` = $1::int8
UNION ALL SELECT ` + claimRow + `, false, NULL FROM ` + claims + ` c WHERE c.id = $1::int8 AND c.until > clock_timestamp()`,
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
		list: `SELECT k.key, s.application_name, ` + remaining + `, l.mode = 'ShareLock', ` + grantOf + `
FROM ` + keys + ` k, ` + holders + ` AND ` + lockID + ` = k.id
  AND k.namespace = $1::text AND substring(k.key FROM 1 FOR octet_length($2::bytea)) = $2::bytea
UNION ALL SELECT c.key, ` + claimRow + `, false, NULL FROM ` + claims + ` c
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
	AND to_regclass('` + groups + `') IS NOT NULL
	AND to_regprocedure('` + fn + `(bigint[])') IS NOT NULL
	AND to_regclass('` + intents + `') IS NOT NULL AND to_regprocedure('` + refused + `(bigint[],bigint)') IS NOT NULL`,
		setup: []string{
			`CREATE SEQUENCE IF NOT EXISTS ` + seq + ` AS bigint MINVALUE 1`,
			`CREATE TABLE IF NOT EXISTS ` + keys + ` (id bigint PRIMARY KEY, namespace text NOT NULL, key bytea NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS ` + claims + ` (id bigint PRIMARY KEY, namespace text NOT NULL, key bytea NOT NULL,
	owner text NOT NULL, token bigint NOT NULL, ttl_ms bigint NOT NULL, since timestamptz NOT NULL, until timestamptz NOT NULL)`,
			`CREATE INDEX IF NOT EXISTS leasehold_claims_until ON ` + claims + ` (until)`,
			`CREATE TABLE IF NOT EXISTS ` + incarnations + ` (started timestamptz PRIMARY KEY,
	first_seen timestamptz NOT NULL, ttl_ms bigint NOT NULL)`,
			// The keys of the groups held now (TryAcquireAll): written and
			// deleted with each group, never needed after a crash.
			`CREATE UNLOGGED TABLE IF NOT EXISTS ` + groups + ` (pid int4, started timestamptz NOT NULL,
	id bigint, token bigint NOT NULL, grp bigint NOT NULL, PRIMARY KEY (pid, id))`,
			`CREATE FUNCTION ` + fn + `(ids bigint[]) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
BEGIN
	RETURN (SELECT min(` + remaining + `) FROM ` + holders + ` AND ` + lockID + ` = ANY(ids));
END
$fn$`,
			// Writers' marks (lock.IntentTTL), never needed after a crash.
			`CREATE UNLOGGED TABLE IF NOT EXISTS ` + intents + ` (id bigint PRIMARY KEY, until timestamptz NOT NULL)`,
			`CREATE FUNCTION ` + refused + `(ids bigint[], ms bigint) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	rem bigint;
	shared bigint[];
BEGIN
	SELECT min(` + remaining + `), array_agg(DISTINCT ` + lockID + `) FILTER (WHERE l.mode = 'ShareLock')
	  INTO rem, shared FROM ` + holders + ` AND ` + lockID + ` = ANY(ids);
	IF shared IS NOT NULL THEN
		DELETE FROM ` + intents + ` WHERE id IN (SELECT id FROM ` + intents + `
			WHERE until < clock_timestamp() - interval '1 minute' LIMIT 8 FOR UPDATE SKIP LOCKED);
		INSERT INTO ` + intents + ` AS i (id, until) SELECT unnest(shared), clock_timestamp() + ms * interval '1 millisecond'
		ON CONFLICT (id) DO UPDATE SET until = EXCLUDED.until;
	END IF;
	RETURN rem;
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
