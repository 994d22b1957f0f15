// Package lock is the contract of leasehold: time-bounded, fenced ownership
// of a key (a lease), implemented by every backend (memlock, redislock,
// pglock, etcdlock) and used by everything above them (semaphore, leader,
// timers, jobs).
//
// # The contract
//
// A Lock grants a key to one owner for a ttl and returns a Handle. Every
// backend keeps these promises, and lock/locktest checks each of them:
//
//  1. Grant safety. For one key, the backend never has two unexpired grants
//     at once.
//  2. Fencing. Each grant's Token is strictly greater than every earlier
//     grant's token for the same key and is never reused (across a restart
//     of the backend's server too, wherever the backend allows it).
//  3. Conservative validity. ValidUntil counts from the clock reading taken
//     before the request was sent, plus the ttl, minus a drift allowance:
//     before that instant no other grant can exist (see the limits below).
//  4. Ownership. Extend and Release act only on their own grant. If it is
//     gone they return ErrLost and never touch a newer holder's grant;
//     Extend never silently re-acquires; a second Release returns ErrLost.
//  5. No leaks. A cancelled or failed acquire leaves no grant behind longer
//     than its ttl, and no goroutine at all.
//  6. Liveness. A crashed holder's key becomes acquirable within the ttl
//     (plus the backend's stated slack).
//  7. Checked input. An empty key, a key over MaxKeyLen bytes, a ttl ≤ 0,
//     below the backend's minimum or above its maximum, too many keys in one
//     call, a nil context: a clear error that
//     matches ErrInvalidArgument (and ErrInvalidKey or ErrInvalidTTL),
//     never a panic or a hang. Use after Release returns ErrLost.
//
// # Limits
//
// Every backend states its limits (Limits, through Limited; LimitsOf reads
// them, and DefaultLimits stand for a backend that states none), and every
// entry point checks them before anything is sent: TryAcquire, Extend,
// Claim, AcquireQueued, TryAcquireAny, Subscribe, and the helpers Acquire,
// Claim, Do, Hold, Keep and HealthCheck. Input outside them is an error
// that matches ErrInvalidArgument (ErrInvalidTTL, ErrInvalidKey), returned
// at once: never retried, never converted with an overflow.
//
//   - key: 1 to MaxKeyLen (1024) bytes, any bytes.
//   - ttl: above 0 and at least the backend's MinTTL (redislock and pglock
//     10 ms; etcdlock rounds a shorter ttl up instead; memlock any), at most
//     its MaxTTL (MaxTTL, 366 days; pglock 24.8 days, idle_session_timeout's
//     2³¹−1 ms). Keep's renew interval must be at least MinRenewInterval
//     (1 ms) and below the ttl less the margin.
//   - keys per TryAcquireAny or Subscribe call: 1 to MaxKeys (4096) on every
//     built-in backend.
//   - names the tools turn into keys (semaphore, election, timer):
//     CheckName, 1 to MaxNameLen (512) bytes; owners: CheckOwner.
//
// Remaining ttls that a backend reads back from its server (hints of
// ErrNotAcquired, Inspector's Remaining) are clamped to [0, MaxTTL]
// (backendkit.RemainingMillis), as anything another client wrote may be there.
//
// Errors are sentinels for errors.Is. An Extend has three outcomes: renewed
// (nil), lost (ErrLost), and unknown (anything else, typically
// ErrUnavailable); treat unknown as "still valid until ValidUntil".
//
// # The helpers
//
// Acquire blocks until the key is granted. It is woken by the holder's
// release on a backend with release notifications (Waiter) or a queue of
// waiters (Queue: served about first come, first served), not by a polling
// tick; the remaining ttl a failed attempt reports bounds its sleep, so a
// crashed holder's key is taken as soon as it expires.
//
// Keep renews a handle every ttl/3 and gives the holder a context that is
// cancelled, with a cause matching ErrLost, the moment the grant can no
// longer be trusted: a renewal reported the loss, ValidUntil passed without
// a successful renewal, or the backend announced the loss (LossNotifier).
// Renewal stops before Release releases.
//
// Do is Acquire + Keep + fn + Release; fn's context carries the token
// (TokenFrom). HealthCheck probes a backend for readiness endpoints.
//
// # What no lease can promise, and what fencing adds
//
// A holder that is paused (GC, SIGSTOP, a VM migration) after it checked
// ValidUntil may go on writing after its grant expired and a successor was
// granted; a server whose clock jumps forward expires grants early. Keep
// cancels the work's context as early as it can, but nothing in the lock
// can stop a write already on its way. So the protected resource must
// check the fencing token: remember the highest token it accepted and
// refuse a lower one.
//
//   - SQL: UPDATE jobs SET ..., fence = $token WHERE id = $id AND fence <= $token;
//     zero rows updated means the writer is stale.
//   - Redis: a Lua script that reads the stored fence, refuses a lower
//     token, and writes the value and the new fence together.
//   - In process: Fence (see its example).
//
// Without fencing, the lock avoids duplicate work almost always but does
// not guarantee correctness.
//
// # Observability
//
// Options WithLogger, WithMeterProvider and WithTracerProvider configure
// backends and helpers alike; by default they use slog.Default and the
// global OpenTelemetry providers, which cost nothing until an application
// installs an SDK. State changes (a lease lost) are logged at Warn,
// per-operation detail at Debug. backendkit.Telemetry lists the metric names.
//
// # Writing a backend
//
// A backend implements Lock and Handle (and the optional capabilities it
// can do better than the generic path: Waiter, Queue, MultiLock, Claimer,
// Inspector, LossNotifier, Owned) with the toolkit of package
// lock/backendkit, and runs lock/locktest.Run against a real server.
package lock
