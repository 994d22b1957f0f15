// Package redislock is the Redis backend of leasehold: a lock.Lock on any
// go-redis UniversalClient — a single server, a Sentinel-managed failover
// client, or Redis Cluster.
//
// Every operation is one round trip (a Lua script). Fencing tokens are
// max(last + 1, server time in µs) from a per-key counter, so they keep
// growing even when the counter is lost. Extend and Release act only on
// their own grant. lock.Acquire of one key waits in a queue kept in Redis:
// a release hands the key to the first live waiter, in arrival order;
// Subscribe (lock.Waiter) is one pub/sub subscription per Lock. A key with
// a hash tag of its own ({…}) keeps it, so TryAcquireAny over keys of one
// tag works on Cluster; over several slots it fails with
// lock.ErrInvalidKey. Every call ends when its context does; set
// ContextTimeoutEnabled on the client (backend.Open does) to spare a
// goroutine per call.
//
// Limits (lock.Limited; out of them, an error matching
// lock.ErrInvalidArgument, before anything is sent):
//
//   - ttl: MinTTL (10 ms) to MaxTTL (lock.MaxTTL, 366 days), at every entry
//     point (TryAcquire, Extend, AcquireQueued, TryAcquireAny, lock.Claim,
//     lock.Keep); ttls are whole milliseconds (rounded up);
//   - keys per TryAcquireAny or Subscribe: MaxKeys (lock.MaxKeys, 4096).
//     One script looks at 512 keys at most; over more keys TryAcquireAny
//     runs several, one round trip each, until one grants a key;
//   - handles per Batch.Renew and requests per ClaimEach: any number, in
//     scripts of 1,000 and 64 keys; handles per ReleaseEach: any number,
//     in scripts of 32;
//   - keys per TryAcquireAll: MaxGroupKeys (256: one script holds the
//     whole group);
//   - key: 1 to lock.MaxKeyLen bytes.
//
// Shared grants (lock.SharedLock). TryAcquireShared makes a share of a key
// in one script: many at once, never beside an exclusive grant. While a
// key has shares its grant key holds a marker (so TryAcquire's path is
// unchanged) that expires with the latest share, and the shares, each
// with its own expiry, are a sorted set beside it. An exclusive attempt
// refused because of shares (TryAcquire, each attempt of AcquireQueued,
// TryAcquireAll) marks the key as wanted by a writer for lock.IntentTTL;
// new shares are refused while the mark lives or a writer waits in the
// key's queue, so readers drain and the writer gets the key (handed to the
// queue's first waiter by the last share's release). Shares draw tokens
// from the key's fence counter: every grant's token, shared or exclusive,
// is above every earlier grant's. A share's Extend and Release act on it
// alone; Inspect reports the share that expires first (lock.Grant.Shared),
// List each share.
//
// All-of grants (lock.GroupLock). TryAcquireAll takes every key of a set
// exclusively, or none, in one script; queued waiters are not looked at,
// as TryAcquire does not look at them. Each key has its own token; Inspect
// names the group (lock.Grant.Group). The group's Extend and Release are
// one script each. On Cluster the keys of a group must share a hash tag
// ({…}), otherwise lock.ErrInvalidKey.
//
// TryAcquireAnyEach (lock.AnyEachAcquirer) makes many TryAcquireAny in
// one pipeline: scripts of at most 32 requests and 128 of their keys (per
// Cluster slot), each request as TryAcquireAny makes it.
//
// Many grants (lock.Batcher, lock.EachClaimer). A Batch (NewBatch, which
// lock.Keeper uses) renews many grants of the Lock together: one script
// per chunk of at most 1,000 keys (on a Cluster, keys of one hash slot:
// give keys that are held together a common hash tag, or each slot makes
// a chunk of its own), all chunks in one pipeline, so a renewal costs one
// round trip of wall time (one per master on a Cluster, sent at once),
// and a lost grant is reported alone. Shares are not renewed by a batch
// (lock.ErrInvalidArgument: they are extended alone). ClaimEach makes many
// claims (lock.Claim) the same way, in chunks of at most 64 keys, and
// ReleaseEach (lock.EachReleaser) releases many grants so, 32 a chunk,
// each as its Release would (waiters handed the key or notified).
//
// What a pipeline costs the server's other clients. Redis reads a client's
// input 16 KB at a time, once in each pass of its event loop, runs each
// command that read completed, whole, and every other client waits for
// the pass. So a pipeline of any length delays the others by about the
// work of 16 KB of it per pass, or of one chunk when a chunk is larger,
// and the chunks are sized for that: about 80 claims a pass (a chunk of 64
// is 12 KB, 0.4 ms), one or two release chunks (32 grants, 14 KB, 0.2 ms
// each), one renewal chunk (1,000 keys, over 100 KB, 1.3 ms), about 70
// TryAcquireAnyEach requests (16 KB, about 1 ms: these cost the most per
// byte). A chunk of 250 claims (48 KB) or of 200 releases ran whole in
// the pass that completed it, 1.5 and 1 ms.
//
// No script of this package works on an unbounded set, so that none
// stalls the server's other clients for long (each bound below costs the
// server about 1.5 ms at most; docs/redis.md, "Scale"): 1,000 keys per
// renewal chunk, 64 per claim chunk (about 0.4 ms), 32 per release chunk
// (about 0.2 ms), 512 per TryAcquireAny script,
// MaxGroupKeys (256) per TryAcquireAll, 1,000 expired shares dropped per
// call, 1,000 queued waiters per Waiting script (a longer queue takes a
// round trip per 1,000); List walks 200 slots of the keyspace per SCAN
// (about 0.06 ms) and reads a key's shares 1,000 at a time.
// A TryAcquireAnyEach chunk (32 requests, 128 keys) costs about 0.5 ms.
//
// Values read back from Redis (remaining ttls, fence counters, queue
// entries) are not trusted: they are clamped or dropped.
//
// Failure modes. Redis expires keys on its own clock and replicates
// asynchronously:
//
//   - A failover (Sentinel, Cluster) can lose grants that the replicas had
//     not received: a second owner is granted while the first still
//     believes it holds the key, until its next Extend reports lock.ErrLost
//     (and lock.Keep cancels its context). WithReplicaAcks closes this gap:
//     every grant, extension and handoff then waits for n replicas' acks
//     (WAIT, in the same round trip), and one not acknowledged in time is
//     undone and reported as lock.ErrUnavailable. A restart without AOF
//     persistence loses every grant whatever the option. Tokens still order
//     two owners (unless the new primary's clock is behind by more than the
//     time since the first grant), so a resource that checks them refuses
//     the first owner's late writes.
//   - A server clock that jumps forward expires grants early; one that
//     jumps backward delays expiry. Run Redis hosts with NTP slewing.
//   - A paused client (GC, SIGSTOP) can outlive its ttl: fence your writes
//     (see package lock).
//   - A reply lost and retried by go-redis reports what the first attempt
//     did: no false loss, no leaked grant.
//
// For a lock whose safety must survive a primary failure, use
// WithReplicaAcks on a primary with replicas (Sentinel, or a Cluster with
// replicas), PostgreSQL with a synchronous standby, or etcd; leasehold does
// not implement Redlock.
//
// How each operation works, the queue, the key layout and client retries:
// docs/redis.md.
package redislock
