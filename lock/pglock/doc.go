// Package pglock is the PostgreSQL backend of leasehold: a lock.Lock on
// session advisory locks, over a pgx connection pool (pgxpool).
//
// A grant is a session advisory lock held by one pooled connection until
// Release, so the pool's MaxConns bounds the grants (and the waiters) of a
// process. Every operation is one round trip. Fencing tokens come from the
// sequence leasehold_tokens and keep growing across a crash and restart of
// the server. The objects are created on first use, or beforehand by Setup
// (SetupStatements prints them for a DBA). Claim (lock.Claimer) keeps
// one-off claims in a table and holds no connection afterwards.
//
// The ttl is enforced by the server: idle_session_timeout (PostgreSQL 14
// and later) ends a paused or partitioned holder's session after its ttl,
// and a reset connection ends it at once. Before PostgreSQL 14 a paused
// holder keeps its lock until its session ends: ValidUntil and lock.Keep
// still stop its own work in time, but a successor may wait much longer
// than the ttl (New logs a warning).
//
// Limits (lock.Limited; out of them, an error matching
// lock.ErrInvalidArgument, before anything is sent):
//
//   - ttl: MinTTL (10 ms) to MaxTTL (2³¹−1 ms, about 24.8 days: the largest
//     idle_session_timeout), at every entry point (TryAcquire, Extend,
//     AcquireQueued, TryAcquireAny, Claim, lock.Keep);
//   - keys per TryAcquireAny or Subscribe: MaxKeys (lock.MaxKeys, 4096);
//     per TryAcquireAll: MaxGroupKeys (64);
//   - key: 1 to lock.MaxKeyLen bytes.
//
// Many grants (lock.Batcher, lock.EachClaimer): NewBatch holds many
// grants as advisory locks on at most WithBatchSessions (default 4) server
// sessions, whose idle_session_timeout is their shared ttl; a Renew is one
// statement per session, and a session that ends loses its grants alone
// (this is how one lost grant is reported on its own). The server's lock
// table bounds them. Sizing rule: the table is made for
// max_locks_per_transaction × (max_connections + max_prepared_transactions)
// locks, 6,400 by default, shared by every session of the server; a batch
// holds at most that many. Past it (or when the table is full sooner,
// other sessions holding locks too) the new grant fails with
// ErrLockTableFull, and nothing else breaks: held grants renew and
// release, and other clients still connect and query. PostgreSQL would
// lend a fuller table the shared memory that new connections need ("out of
// shared memory" when they start), which is why a batch stops at the
// nominal size. Raise max_locks_per_transaction for more. ClaimEach makes claims in one statement per ClaimChunk (1,000).
// lock.TryAcquireAnyEach takes the generic path here: one TryAcquireAny
// (one statement) per request, 16 at once.
// See NewBatch and docs/postgres.md.
//
// Shared grants (lock.SharedLock): TryAcquireShared takes the server's
// shared advisory lock (pg_try_advisory_lock_shared) on a session of its
// own, with the ttl, quarantine, loss reports and token sequence of an
// exclusive grant: every grant's token, shared or exclusive, is larger
// than every earlier grant's of the key. A reader is refused while a
// writer holds the key; while a writer waits in the server's queue
// (AcquireQueued, which lock.Acquire uses), as the server's lock manager
// refuses a request that conflicts with a queued one; and for
// lock.IntentTTL after an exclusive TryAcquire or TryAcquireAll was
// refused because the key was held shared (a mark in the unlogged table
// leasehold_intents). A release, shared or exclusive, wakes the key's
// waiters (lock.AcquireShared waits on Subscribe).
//
// All-of grants (lock.GroupLock): TryAcquireAll tries every key's
// advisory lock in one statement on one session, in the order of their
// ids, and unlocks what it took when a key is held, so it never holds a
// part of its set and groups never deadlock; the error names the held key
// with the longest remaining ttl among the set's holders. Each key draws
// its own token. The session keeps the keys and their tokens in the
// unlogged table leasehold_group_keys, where Inspect and List find them
// (Grant.Group is the group's first token). Extend and Release are one
// round trip each.
//
// Failure modes:
//
//   - Loss: a handle's grant is lost when its session ends (terminated,
//     timed out, connection broken) or its lock is gone from pg_locks;
//     handles are lock.LossNotifiers and report it as it happens.
//     Cancelling an Extend or Release mid-way ends the grant.
//   - Poolers: a pooler in transaction or statement mode (PgBouncer, RDS
//     Proxy, ...) would leave locks with sessions that serve other clients;
//     TryAcquire detects it and refuses with ErrPooler, taking nothing. A
//     session-mode pooler works: say so with WithSessionPooler.
//   - Restart and failover: advisory locks live in the server's memory and
//     are not replicated. After a restart or a failover every grant is
//     lost (holders are told, by their ValidUntil). The new server
//     incarnation grants nothing until then: its quarantine, as long as
//     the longest ttl granted before, counted from its first sighting
//     (quarantine.go; the ttls are recorded in leasehold_incarnations
//     before grants of that length are made). A try in the quarantine
//     fails with ErrQuarantined (an ErrNotAcquired with the time left);
//     a queued acquire waits. WithoutQuarantine turns it off, leaving
//     fencing to order a successor's writes and a lost holder's. With a
//     synchronous standby (and a multi-host DSN with
//     target_session_attrs=read-write) tokens keep growing and claims
//     survive; with asynchronous replication the new primary may hand out
//     tokens again that the old one used, and may lack the last ttls.
//     A standby promoted while the old primary still serves clients (a
//     split brain) is not covered.
//   - A full lock table: ErrLockTableFull (matches lock.ErrUnavailable, so
//     lock.Acquire retries); held grants keep working.
//   - Waiting: a waiter in lock.Acquire holds a connection and a snapshot
//     (very long waits hold back vacuum). A crashed holder sends no
//     notification: waiters retry at its remaining ttl.
//   - Inspector: Remaining is unknown (0) for other roles' sessions without
//     pg_read_all_stats; an owner is cut to about 30 bytes, and bytes that
//     are not printable ASCII show as '?'. Values read back from the server
//     are not trusted.
//
// How each operation works, the objects and the grants a DBA gives, and
// half-open connections: docs/postgres.md.
package pglock
