// Package pglock is the PostgreSQL backend of leasehold: a lock.Lock on
// session advisory locks, over a pgx connection pool (pgxpool).
//
// # How it works
//
// A grant is a session advisory lock, pg_try_advisory_lock(bigint), held
// by one pooled connection that the grant keeps until Release: a connection
// never carries two grants, so the pool's MaxConns bounds how many grants a
// process holds at once. Every operation on a grant is one round trip, one
// SELECT:
//
//   - Acquire takes the lock and, only when it got it, draws the fencing
//     token (nextval of the sequence leasehold_tokens), sets the session's
//     idle_session_timeout to the ttl and its application_name to
//     "<token> <ttl ms> <since> <owner>" (since: the grant's server time
//     in Unix ms). For one key the statement is a plain
//     pg_try_advisory_lock; for several (MultiLock) a recursive CTE that
//     stops at the first free key. When the key is held it reports the
//     holder's remaining ttl, which lock.Acquire uses as its longest sleep.
//     The same statement compares pg_backend_pid() with the pid the
//     connection was given at connect time, and takes no lock when they
//     differ (see Poolers).
//   - Extend checks in pg_locks that the lock is held by the session it was
//     taken on, and resets idle_session_timeout to the new ttl.
//   - Release unlocks, puts idle_session_timeout back to the server's value
//     (a pooled connection must not keep it, or the server would end it
//     while idle in the pool), and sends a NOTIFY when someone waits for
//     the key; the connection goes back to the pool.
//   - TryAcquireAny tries a set of keys in turn in one statement, from a
//     random offset, and takes the first free one (the semaphore's path).
//   - Keys are hashed on the client: the advisory lock id of key is the
//     first 8 bytes of SHA-256(namespace, 0, key) (see ID and
//     WithNamespace), never hashtext, which has 32 bits and collides.
//
// # The ttl is enforced by the server
//
// A holding session sits idle between statements, and idle_session_timeout
// (PostgreSQL 14 and later) ends it after ttl without a statement: the
// server then frees the lock, exactly like a Redis key expiring. So a
// paused or partitioned holder (SIGSTOP, a long GC, a host gone silent) is
// cut off by the server after its ttl, and a crashed holder's session ends
// at once when its TCP connection is reset. ValidUntil counts from the
// moment the request was sent, before the server started its timer, minus
// lock.DriftAllowance; ttls are whole milliseconds (MinTTL to MaxTTL).
//
// Limits (lock.Limited; out of them, an error matching
// lock.ErrInvalidArgument, before anything is sent):
//
//   - ttl: MinTTL (10 ms) to MaxTTL (2³¹−1 ms, about 24.8 days: the largest
//     idle_session_timeout), at every entry point (TryAcquire, Extend,
//     AcquireQueued, TryAcquireAny, Claim, lock.Keep);
//   - keys per TryAcquireAny or Subscribe: MaxKeys (lock.MaxKeys, 4096);
//   - key: 1 to lock.MaxKeyLen bytes.
//
// A holder's application_name ("<token> <ttl ms> <since> <owner>") is read
// back for hints and Inspect; any session holding the lock can set it, so
// only a ttl of at most 18 digits is taken as one.
//
// Before PostgreSQL 14 there is no idle_session_timeout: the ttl is not
// enforced by the server. A holder that is paused keeps its lock until its
// session ends, which for a half-open connection is when the server's TCP
// keepalives give up (tcp_keepalives_idle, _interval, _count and
// tcp_user_timeout in postgresql.conf). The handle's ValidUntil and Keep
// still end the holder's own work in time, so with fenced writes nothing
// breaks, but a successor may wait much longer than the ttl. New logs a
// warning on such a server.
//
// # Tokens
//
// Tokens come from one sequence, created on first use together with the
// table of key names (CREATE ... IF NOT EXISTS, safe when several
// processes start at once), or by Setup for a role that may not create
// them. Drawing a token assigns no transaction id and writes nothing but
// the sequence's own WAL record once per 32 values, so acquires do not
// queue on WAL flushes (a test checks that 1,000 acquires add fewer than
// 100 WAL records). The acquiring statement commits with synchronous_commit
// on, so that a sequence advance is on disk before its token is used:
// tokens keep growing across a crash and restart of the server. Key names
// are recorded once per key and Lock instance, for List; delete old rows
// of leasehold_keys at will, only List reads them.
//
// The objects, for a DBA to create beforehand (SetupStatements prints the
// exact statements):
//
//	CREATE SEQUENCE leasehold_tokens AS bigint MINVALUE 1;
//	CREATE TABLE leasehold_keys (id bigint PRIMARY KEY, namespace text NOT NULL, key bytea NOT NULL);
//	CREATE TABLE leasehold_claims (...); -- one-off claims (Claim), and an index on their expiry
//	CREATE FUNCTION leasehold_remaining_v2(ids bigint[]) ... -- the holders' remaining ttl
//
// (v2 replaces leasehold_remaining_v1, which failed on a holder's
// application_name with an over-long number in it; where a DBA created the
// objects, run SetupStatements again after upgrading, and drop v1.)
//
// with USAGE on the sequence, SELECT, INSERT on leasehold_keys, SELECT,
// INSERT, UPDATE, DELETE on leasehold_claims and EXECUTE on the function for the application's role (WithSchema puts them in a
// schema).
//
// # Claims
//
// A grant holds a session, and so a pooled connection, until it is
// released or its ttl ends. A one-off claim that is never released (a
// timer's claim on a tick) would hold one for its whole ttl: Claim
// (lock.Claimer) records it in the leasehold_claims table instead, in one
// statement that holds nothing afterwards. Claims and grants are separate:
// a key is claimed or locked, not both. Each claim deletes a few lapsed
// ones, so the table holds about the live claims.
//
// # Waiting
//
// lock.Acquire of one key waits in the server's own queue (lock.Queue,
// AcquireQueued): one statement blocks in pg_advisory_lock on a pooled
// connection of its own, and on the grant draws the token and sets the ttl
// like TryAcquire. The server serves waiters in arrival order and a release
// wakes only the next one, so contention costs no herd of attempts: 16
// workers on one key run about 10 times as many grants per second as with
// notifications, and each gets its fair share. The ttl counts from the
// grant: the reply says how long the statement waited. A waiter whose
// context ends is cancelled and its connection closed, so it holds nothing.
// Each waiter holds a connection (pool size bounds the waiters of one Lock)
// and, like any running statement, a snapshot: very long waits hold back
// vacuum's horizon. The first attempt on a key this instance has not seen
// is a plain one, which records the key's name for List.
//
// Subscribe (lock.Waiter), for the semaphore's several keys and leader
// election, shares one connection per Lock, taken out of the
// pool, that LISTENs on the namespace's channel and holds, for each key
// someone waits for, a shared advisory lock in the (int4, int4) space with
// the key's 64 bits: its "interest". Release notifies only when
// pg_try_advisory_xact_lock on that interest fails, so an uncontended
// release assigns no transaction id (a NOTIFY does). Subscribe returns once
// LISTEN is active and the interest is held, so a release after it is never
// missed; when the connection breaks, every waiter is woken to try again
// and the connection is made again. A grant that ends without a Release (a
// crashed or timed-out holder) sends no notification: Acquire then retries
// at the remaining ttl it was told, or at its backoff.
//
// # Loss
//
// A handle's grant is lost when a round trip on its connection fails (the
// session was terminated, timed out by the server, or the connection
// broke) or when the lock is no longer in pg_locks for the session. The
// handle implements lock.LossNotifier: once Lost has been called (lock.Keep
// does), a goroutine waits on the idle connection's socket and reports the
// end of the session the moment the server closes it. Cancelling an
// Extend or Release mid-way closes the connection, which ends the grant.
// ForceRelease terminates the holder's session (pg_terminate_backend).
//
// # Inspector
//
// Inspect and List read pg_locks joined with the holders' activity
// (pg_stat_get_activity): owner, token, ttl and the grant's time (Since)
// from application_name, the remaining ttl from how long the session has
// been idle. application_name holds 63 printable ASCII bytes: an owner is
// cut to what fits after the numbers (about 30 bytes), and other bytes show
// as '?'. A role sees the activity of other roles' sessions
// only with pg_read_all_stats; otherwise Remaining is unknown (0). List
// finds key names in leasehold_keys.
//
// # Poolers
//
// Session advisory locks belong to a server session. A pooler in
// transaction or statement mode (PgBouncer, Pgpool, RDS Proxy, Supavisor)
// hands each transaction to whichever server session is free, so a lock
// taken in one statement would stay with a session that then serves other
// clients. TryAcquire refuses such a connection with ErrPooler: the acquire
// statement sees that the server session answering is not the one the
// connection was opened with (the pid of the startup message, which a
// pooler makes up), and takes no lock; a pooler that reshuffles pgx's
// prepared statements is recognised too. A pooler in session mode pins one
// server session to each client connection and works: say so with
// WithSessionPooler. Best is a direct connection.
//
// # Failover and the lock table
//
// Advisory locks live in the memory of one server and are not replicated:
// after a failover to a standby every lock is gone, every holder's session
// with it, so holders learn of the loss (LossNotifier, or their next
// Extend), and new grants are made on the new primary. Tokens survive a
// failover only as far as the sequence had been replicated: with
// asynchronous replication the new primary can hand out tokens again that
// the old one had used. Fence writes and use synchronous replication (or
// fence by something else) where that matters.
//
// The lock table is shared memory for max_locks_per_transaction ×
// (max_connections + max_prepared_transactions) locks, shared with every
// table lock of the server. When it is full, TryAcquire fails with
// ErrLockTableFull (which also matches lock.ErrUnavailable, so
// lock.Acquire retries), held grants go on working, and acquisition
// recovers when locks are freed.
//
// # Half-open connections
//
// A client that loses its network without a reset leaves a half-open
// connection. On the server, idle_session_timeout ends the holder's session
// after its ttl; before PostgreSQL 14 set the server's tcp_keepalives_* and
// tcp_user_timeout low enough. On the client, pgx dials with a TCP
// keepalive (5 minutes unless the pool's DialFunc says otherwise), and
// every operation is bounded by its context: Keep bounds each Extend by
// ValidUntil, so a holder stops trusting its grant in time even when no
// packet comes back.
package pglock
