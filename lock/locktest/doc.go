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
// When the backend is a lock.SharedLock, Shared/… checks its shared
// grants: shares of several instances coexist and exclude an exclusive
// grant, and an exclusive grant excludes them (Basics); a refused writer
// holds new shares off for lock.IntentTTL, and no longer than that plus
// slack (Intent); readers and writers of 4 instances contend and never
// overlap, by occupancy counters, by tokens, and by the ValidUntil of
// grants left to expire (Exclusion); a writer's lock.Acquire wins within
// the readers' ttl + IntentTTL + slack against readers that re-acquire
// back to back (WriterNotStarved); an abandoned share frees within ttl +
// slack and its Extend and Release then return ErrLost (Abandoned);
// Extend and Release of shares, ErrLost after Release (ExtendRelease);
// lock.Keep on a share (SharedKeep, run alone with the other renewal
// checks); every grant's token exceeds every earlier one's, so a
// writer's fenced write refuses earlier readers (Tokens); and, on a
// Waiter, a blocked AcquireShared wakes at the writer's release and a
// blocked Acquire at the last share's, not by polling (Waiter); on an
// Inspector, List reports each share (Grant.Shared) and Inspect the one
// that expires first (Inspector).
//
// When the backend is a lock.GroupLock, Group/… checks its all-of grants:
// a refused TryAcquireAll holds none of its keys (NoPartial); overlapping
// sets and single keys contend with per-key occupancy counters and fenced
// writes (Contention); a refusal names a held key and reports the longest
// remaining ttl (Conflict); each key has its own token, above that key's
// earlier ones (Tokens); Extend and Release of the whole group
// (ExtendRelease); an abandoned group's keys free within ttl + slack and
// its Extend and Release return ErrLost (Expiry); two overlapping
// AcquireAll waiters both finish (OverlappingWaiters); duplicate keys, no
// keys or too many are refused with ErrInvalidArgument (BadInput); on an
// Inspector, the grants of one group share a Group id (Inspector).
//
// RunReleaseEach checks lock.ReleaseEach (natively on a lock.EachReleaser):
// outcomes in order across chunks, lost and expired handles, released keys
// free at once, and waiters woken by it within 300 ms.
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
// unavailable below its stated MaxKeys, shares granted beside a writer, a
// writer whose intent is never marked, share tokens apart from the
// writers', an all-of grant that keeps the keys it took on conflict, one
// whose refusal reports the shortest remaining ttl) and check that it
// reports each one.
//
// BenchSharedAcquireRelease, BenchGroup and BenchReadersWriter measure the
// shared and all-of shapes, as BenchTryAcquireRelease and BenchHandoff do
// the exclusive one.
//
// RunAcquireEach checks lock.TryAcquireAnyEach (see its doc), and
// BenchAcquireEach measures it.
package locktest
