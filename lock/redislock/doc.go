// Package redislock is the Redis backend of leasehold: a lock.Lock on any
// go-redis UniversalClient — a single server, a Sentinel-managed failover
// client, or Redis Cluster.
//
// # How it works
//
// Every operation is one round trip: a Lua script (acquire.lua, extend.lua,
// release.lua, in this directory) sent with EVALSHA, and with EVAL when the
// server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
//
//   - Acquire checks the key, draws the fencing token, and stores
//     "<token>|<granted at>|<attempt>|<owner>" with the ttl as PX (attempt:
//     a random id of this acquire call). When the key is held it returns
//     the remaining ttl, which lock.Acquire uses as its longest sleep.
//   - Tokens are max(last + 1, server TIME in µs), from a per-key fence
//     counter. The counter makes them strictly increasing; the clock keeps
//     them increasing when the counter is lost (a restart without
//     persistence, FLUSHALL, a failover to a replica that had not received
//     it, or its own expiry an hour after the key's last grant).
//   - Extend and Release compare the stored value with the grant's before
//     they touch the key, so they never act on a newer holder's grant.
//     Release also PUBLISHes the key on the release channel.
//   - Deadlines: every call ends when its context does, also when the
//     server stops answering. go-redis bounds socket reads and writes by
//     the context only with ContextTimeoutEnabled; without it a stalled
//     server holds a call for the client's ReadTimeout (seconds), past a
//     lease's ValidUntil. So for such a client each call that has a
//     context that can end runs on a goroutine of its own, and the caller
//     returns at the deadline while the call finishes in the background.
//     Set ContextTimeoutEnabled: true on the client to avoid that
//     goroutine (backend.Open does).
//   - Waiting: one subscription per Lock to "<prefix>released", shared by
//     every waiter and made on first use; Subscribe returns once the server
//     has confirmed it. When the subscription's connection breaks, every
//     waiter is woken to try again, since a release may have been missed.
//   - Queued waiting (lock.Queue, which lock.Acquire uses for one key): a
//     failed attempt of AcquireQueued puts the waiter in the key's queue in
//     Redis, and Release (handoff.lua) hands the key straight to the first
//     live waiter of it: it draws the token, stores the grant as the
//     waiter's own attempt would have, and sends that waiter alone a
//     message with the token; the others sleep on. A handoff costs the
//     release and nothing more, and waiters are served in arrival order
//     (TestAcquireQueuedWakesTheHeadOfTheQueue: 8 handoffs, 0 attempts).
//     The waiter's ValidUntil counts from its last attempt plus the time
//     the server saw pass between that attempt and the grant. A waiter
//     that missed the message finds its grant at its next attempt, which
//     comes at least every second and keeps its place; one that stops
//     trying loses its place two seconds later, and a release skips it. A
//     waiter whose context ends leaves the queue (leave.lua) and releases
//     the key if it was handed it meanwhile; one that crashed within those
//     two seconds may be handed the key, which is then free after its ttl,
//     as after a crashed holder. The semaphore and leader election keep
//     the broadcast: they wait on several keys, or among few candidates.
//   - TryAcquireAny grants the first free key of a set in one script,
//     starting at a random offset: the semaphore's one round trip.
//   - Inspect and List report owner, token and remaining ttl; List uses
//     SCAN (never KEYS), on every master of a Cluster.
//
// Keys: a lock key and its fence counter always share a Cluster hash slot
// (see keys.go for the layout). A key that has a hash tag of its own ({…})
// keeps it, so keys that share a tag (the slots of one semaphore) share a
// slot, and TryAcquireAny over them works on Cluster; over keys in several
// slots it fails with lock.ErrInvalidKey.
//
// ValidUntil is the time the acquire or extend request was sent, plus the
// ttl, minus lock.DriftAllowance (1% + 2 ms). ttls are whole milliseconds
// (rounded up).
//
// Limits (lock.Limited; out of them, an error matching
// lock.ErrInvalidArgument, before anything is sent):
//
//   - ttl: MinTTL (10 ms) to MaxTTL (lock.MaxTTL, 366 days), at every entry
//     point (TryAcquire, Extend, AcquireQueued, TryAcquireAny, lock.Claim,
//     lock.Keep);
//   - keys per TryAcquireAny or Subscribe: MaxKeys (lock.MaxKeys, 4096).
//     One acquire script looks at 1024 keys at most (about 3 ms of server
//     time when all are held; 4096 took ~11 ms, and Lua unpacks at most
//     8000 values): TryAcquireAny over more keys runs such scripts one
//     after the other, from a random one, until one grants a key — one
//     round trip up to 1024 keys;
//   - key: 1 to lock.MaxKeyLen bytes.
//
// Values read back from Redis are not trusted: a remaining ttl is clamped
// to [0, lock.MaxTTL], a fence counter that is not a number counts as
// lost, a queue entry whose ttl Redis would refuse is dropped, and only the
// Lock's own inbox channel carries handoffs (a key may start with "\x02").
//
// # What Redis can and cannot promise
//
// Redis expires keys on its own clock, and its replication is
// asynchronous. So:
//
//   - A failover (Sentinel or Cluster) can promote a replica that had not
//     yet received a grant: the new primary shows the key free, and a
//     second owner is granted while the first still believes it holds the
//     key. The first owner learns it at its next Extend (ErrLost, and Keep
//     cancels its context), but until then two owners work. The fencing
//     token still orders them: the second grant draws max(last+1, TIME),
//     larger than the first's unless the promoted replica's clock is behind
//     by more than the time since the first grant — so a resource that
//     checks tokens refuses the first owner's writes once the second has
//     written.
//   - A restart without AOF persistence loses every grant: the same as a
//     failover, without even a replica. Holders find out at their next
//     Extend; tokens stay monotonic through the server clock.
//   - A server clock that jumps forward expires grants early (a holder's
//     ValidUntil is then optimistic); one that jumps backward delays
//     expiry and could rewind tokens drawn from TIME after the fence
//     counter is lost. Run Redis hosts with NTP in slewing mode.
//   - A paused client process (GC, SIGSTOP) can outlive its ttl: that is
//     what fencing tokens are for (see package lock).
//
// # Client retries
//
// go-redis retries a command whose reply was lost (MaxRetries, 3 by
// default). The scripts are safe to retry. A Release that took effect and
// whose reply was lost is retried and finds the key gone; the script then
// looks at the key's fence counter: when it still holds the grant's token,
// no grant was made since, and Release returns nil (before ValidUntil) —
// the first attempt did it. A grant evicted by ForceRelease moves the
// counter on, so its holder still hears ErrLost. An acquire that took
// effect and is retried finds its own grant, by the attempt id in the
// value, and returns it (for several keys, without taking another).
//
// For a lock whose safety must survive a primary failure, use PostgreSQL or
// etcd (or accept the above with fencing). leasehold deliberately does not
// implement Redlock: fencing tokens give a stronger guarantee at the
// resource for the failures that matter, at a fraction of the cost.
package redislock
