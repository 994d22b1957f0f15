// Package locktest is the conformance suite of the lock contract. Every
// backend of leasehold runs it, and so should a third-party backend:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, func(t testing.TB) lock.Lock { return mybackend.New(client(t)) })
//	}
//
// The factory returns a new, independent instance of the backend (its own
// owner identity, and its own client where that is cheap) talking to the
// same server as every other instance it returns: each instance stands for
// one process of a fleet.
//
// What Run checks, promise by promise (package lock lists them):
//
//  1. Grant safety: 32 goroutines over 4 instances contend for one key over
//     many rounds; an occupancy counter must never exceed one, and an
//     expired grant's successor must not be granted before the expired
//     grant's ValidUntil.
//  2. Fencing: every grant's token is greater than every earlier grant's,
//     checked in grant order and through a fenced resource that each holder
//     writes at the end of its hold, so that an overlapping newer grant
//     shows up as a rejected stale write.
//  3. Conservative validity: ValidUntil is at most the send time plus ttl,
//     after acquire and after extend.
//  4. Ownership: Extend and Release of an expired or released grant return
//     ErrLost, never re-acquire, never touch the successor's grant.
//  5. No leaks: cancel storms leave no goroutine and no grant behind longer
//     than the ttl.
//  6. Liveness: an abandoned grant's key is acquirable within ttl + slack.
//  7. Input: a table of bad inputs, each answered with a clear error that
//     matches lock.ErrInvalidArgument (or ErrLost for use after Release),
//     with no panic and no hang.
//  8. Limits, as the backend states them (lock.LimitsOf: lock.DefaultLimits
//     for a backend that states none). MaxTTL: a ttl of MaxTTL is not
//     refused as invalid; MaxTTL+1 and math.MaxInt64 are refused with
//     lock.ErrInvalidTTL by TryAcquire, Extend (which leaves the grant
//     alone: another TryAcquire still gets ErrNotAcquired), lock.Claim,
//     lock.Acquire, lock.Keep, and AcquireQueued (lock.Queue) and
//     TryAcquireAny (lock.MultiLock) where the backend has them. MaxKeys:
//     TryAcquireAny and Subscribe take exactly MaxKeys keys; one more is
//     refused with an error that matches lock.ErrInvalidArgument and not
//     lock.ErrUnavailable (which callers retry forever).
//
// and Keep's loss signal (by deadline and by a renewal that reports loss),
// and, when the backend has them, Waiter (no lost wake-up, handoff without
// waiting for the ttl), MultiLock and Inspector.
//
// RunProcessFaults runs a holder in a child process (the test binary,
// re-executed; its TestMain must call HolderMain) and kills it with SIGKILL
// or stops it with SIGSTOP past its ttl, as a crashed or stalled host: the
// key must come free within the ttl, the successor's token must be larger,
// and the stopped holder's late write must be refused.
//
// The suite can fail: its own tests run it against deliberately broken
// wrappers of memlock (a Release that ignores ownership, tokens that repeat,
// a backend that grants twice, one that leaks a goroutine per failed
// attempt, one whose ttl conversion overflows, one that fails as
// unavailable below its stated MaxKeys) and check that it reports each one.
package locktest
