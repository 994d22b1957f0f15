// Package lock is the contract of leasehold: time-bounded, fenced ownership
// of a key, implemented by every backend (memlock, redislock, pglock,
// etcdlock) and used by everything built on them (semaphore, leader,
// timers, jobs).
//
// # The contract
//
// A Lock grants a key to one owner for a ttl and returns a Handle. Every
// backend keeps these promises, and lock/locktest checks each of them:
//
//  1. Grant safety. For one key, never two unexpired grants at once.
//  2. Fencing. Each grant's Token is greater than every earlier grant's
//     token for the key, and is never reused.
//  3. Conservative validity. ValidUntil counts from before the request was
//     sent, less a drift allowance: until then no other grant can exist.
//  4. Ownership. Extend and Release act only on their own grant; when it is
//     gone they return ErrLost. Extend never re-acquires.
//  5. No leaks. A cancelled or failed acquire leaves no grant behind longer
//     than its ttl, and no goroutine.
//  6. Liveness. A crashed holder's key is free again within the ttl (plus
//     the backend's stated slack).
//  7. Checked input. Every entry point checks its input against the
//     backend's Limits before anything is sent: a bad key, ttl, key count
//     or context is an error matching ErrInvalidArgument (ErrInvalidKey,
//     ErrInvalidTTL), returned at once, never retried, never a panic.
//
// Errors are sentinels for errors.Is. An Extend has three outcomes:
// renewed (nil), lost (ErrLost), and unknown (anything else, typically
// ErrUnavailable): treat unknown as "valid until ValidUntil, no longer".
//
// # The helpers
//
// Acquire waits for a key: woken by the holder's release where the backend
// announces releases (Waiter) or queues waiters (Queue), and never sleeping
// past the remaining ttl a refused attempt reported. Keep renews a handle
// and cancels its context, with a cause matching ErrLost, the moment the
// grant can no longer be trusted (at once for a handle already past its
// ValidUntil). Do is Acquire, Keep, fn, Release, and releases when fn
// panics too; Hold is the same for a grant already held. fn's context
// carries the token (TokenFrom).
//
// # Many grants at once
//
// Keep spends a goroutine and a renewal round trip per lease. A process
// that holds many grants (partitions, tenants, runs) holds them through a
// Keeper instead: one goroutine renews all of them each period, through
// the backend's Batch (Batcher) in round trips that grow with its chunks,
// not with the grants, and each lease still ends on its own, at its loss
// or at its ValidUntil. WithKeeper makes Hold and Do use one. ClaimEach
// makes many claims (EachClaimer) in a few round trips: timers claim every
// tick due at one instant with it.
//
// TryAcquireAnyEach makes many TryAcquireAny (AnyEachAcquirer) in a few
// round trips: timers take the slots of those ticks with it. ReleaseEach
// releases many grants (EachReleaser) in a few round trips.
//
// # Shared and all-of grants
//
// Every backend is also a SharedLock and a GroupLock. A SharedLock grants
// a key shared (TryAcquireShared: many readers at once) or exclusive (its
// TryAcquire: one writer, and no reader beside it); a waiting writer stops
// new shared grants, so readers cannot starve it, and every grant's token,
// shared or exclusive, exceeds every earlier grant's of the key. A
// GroupLock grants every key of a set or none (TryAcquireAll), each key
// with its own token, extended and released together; since no attempt
// holds part of a set, waiting for sets cannot deadlock. AcquireShared,
// DoShared, AcquireAll and DoAll are the helpers of both shapes.
//
// # What no lease can promise
//
// A holder that is paused (GC, SIGSTOP, a VM migration) may go on writing
// after its grant expired and a successor was granted. Keep cancels the
// work's context as early as it can, but no lock can stop a write already
// on its way: the protected resource must check the fencing token, keeping
// the highest it accepted and refusing a lower one (Fence shows how; in
// SQL, "UPDATE … SET fence = $token WHERE id = $id AND fence <= $token").
// Without fencing, a lock avoids duplicate work almost always, but does
// not guarantee it.
//
// # Options and telemetry
//
// Every package of leasehold has an option type of its own (this one's,
// Option, configures the helpers), so that an option given to the wrong
// constructor does not compile. What they share, Common (owner identity,
// logger, meter and tracer providers), each takes whole through its
// WithCommon and hands on whole to what it builds. By default they log to
// slog.Default and record to the global OpenTelemetry providers, which cost
// nothing until an application installs an SDK.
//
// docs/guarantees.md lists every limit and the test that holds each
// promise; CONTRIBUTING.md has the vocabulary. A backend is written with
// package lock/backendkit and checked with lock/locktest.Run.
package lock
