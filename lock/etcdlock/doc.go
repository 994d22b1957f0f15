// Package etcdlock is the etcd backend of leasehold: a lock.Lock on a
// go.etcd.io/etcd/client/v3 client, for a single etcd server or a cluster.
// Of the network backends it gives the strongest guarantee: a grant is a
// Raft-replicated write, so it survives the loss of any minority of the
// cluster's members, including the leader.
//
// A grant of key is one etcd key under prefix+key (WithPrefix), followed
// by a NUL, 0x01 and an id of the grant's own (a NUL in key is stored as
// NUL 0xff), attached to an etcd lease; no other key's grants share that
// range. Its fencing token is the grant key's create revision, strictly
// increasing per key across restarts and leader changes, but not
// consecutive. Acquire and TryAcquireAny are one Txn each (put the grant
// key if the key's range holds no grant and no share), Release is one
// delete of the grant key, a renewal is one keepalive: an acquire and
// release cost two round trips, as with concurrency.Mutex. Waiters are
// woken by one watch per Lock. Handles are lock.LossNotifiers. This layout
// is not the one of versions before it: instances that share a prefix must
// all use it.
//
// Shared grants (lock.SharedLock), in the manner of etcd's read-write
// recipe: a share is a key of its own under the key's range (NUL 0x01,
// "s", its id), on its own lease, put by TryAcquireShared's one Txn if the
// range holds no exclusive grant and no writer's intent key; an exclusive
// grant is put only if the range holds no grant and no share. A TryAcquire
// refused because of shares puts the intent key (NUL 0x01, "w") on a lease
// of its own of lock.IntentTTL rounded up to whole seconds and MinTTL (a
// lease grant and a put, on that refused path only), and the writer that
// gets the key revokes it: a reader is refused while a writer holds or
// waits, and at most that lease's ttl (2 s by default, plus up to 500 ms)
// after the last attempt of a writer that gave up. TryAcquireAny does not
// mark the intent. Every grant's token is its create revision, so it
// exceeds every earlier grant's of the key, shared or exclusive. A share
// is a handle like an exclusive grant: Extend, Release, ErrLost, loss
// notification, and its release wakes waiters.
//
// All-of grants (lock.GroupLock): TryAcquireAll is one Txn that compares
// every key's whole range empty (no grant, no share, no intent) and puts
// every key's grant key on one lease, else nothing. All the keys of a
// group have the same token, the Txn's revision: per key it still exceeds
// every earlier grant's. Extend is one keepalive of that lease, Release one
// Txn that deletes every key. Inspect and List name the group (its lease
// id). At most MaxGroupKeys (128, etcd's default --max-txn-ops) keys.
//
// etcd leases count whole seconds and cannot be shorter than 1.5 × the
// election timeout: a ttl is rounded up to whole seconds and to MinTTL
// (DefaultMinTTL, 2 s; WithMinTTL lowers it to 1 s for servers with a
// short election timeout). Rounding is not an error. ValidUntil still
// counts the ttl that was asked for, from the time the request was sent,
// minus the drift allowance, and never more than the lease. A crashed
// holder's key is free when its lease expires: the rounded ttl after its
// last renewal, plus up to 500 ms as a rule; later when many leases expire
// together (etcd revokes at most 1,000 expired leases a second) or when a
// busy server's revoke did not get through (it is tried again 3 s later;
// docs/etcd.md).
//
// Batches (lock.Batcher, used by lock.Keeper): NewBatch's grants share
// leases, at most BatchLeaseGrants (2,000) per lease. Renew sends one
// keepalive per lease, all on one stream, and reads each lease's attached
// keys (one LeaseTimeToLive per lease, at most 8 at once): N grants cost
// 1 + ceil(N/2,000) round trips. A grant whose key was deleted while its
// lease lives (ForceRelease, which leaves a batch's lease be) is ErrLost
// alone; a lease gone ends its grants; no answer leaves them unknown.
// lock.TryAcquireAnyEach takes the generic path here: one TryAcquireAny
// (one Txn) per request, 16 at once.
// ClaimEach (lock.EachClaimer) puts up to MaxClaimsPerTxn (127) claims in
// one Txn of nested Txns, as lock.Claim's generic path would, one lease
// per distinct ttl. ReleaseEach (lock.EachReleaser) deletes up to 128
// grant keys per Txn (etcd's default --max-txn-ops; halved when a server
// refuses it), each settled as its Release. Details: docs/etcd.md.
//
// Limits (lock.Limited; out of them, an error matching
// lock.ErrInvalidArgument, before anything is sent):
//
//   - ttl: above 0 (rounded up to whole seconds and MinTTL) to MaxTTL
//     (lock.MaxTTL, 366 days), at every entry point;
//   - keys per TryAcquireAll: MaxGroupKeys (128): one Txn of a compare,
//     a put and a read per key, within etcd's default --max-txn-ops; a
//     server run with a smaller one refuses bigger groups
//     (lock.ErrInvalidArgument);
//   - keys per TryAcquireAny or Subscribe: MaxKeys (lock.MaxKeys, 4096).
//     One Txn takes at most 64 keys (etcd's --max-txn-ops, 128 by default,
//     counts two per key); over more TryAcquireAny sends several, one round
//     trip each, and halves the batch when a server refuses it;
//   - key: 1 to lock.MaxKeyLen bytes (under the prefix).
//
// Failure modes:
//
//   - Leader change: the new leader restarts every lease's countdown, so a
//     crashed holder's key may stay held up to one more ttl (plus the
//     election). A holder's ValidUntil is unaffected.
//   - Quorum loss: nothing is granted, renewed or released; calls fail with
//     lock.ErrUnavailable when their context ends (give every call a
//     deadline), and a holder under lock.Keep is told of the loss at its
//     ValidUntil. No one else gets the key until the quorum returns and the
//     old lease runs out.
//   - An unreachable server: clientv3 waits as long as the context allows,
//     then lock.ErrUnavailable. Give the client a DialTimeout and every
//     endpoint.
//   - A paused holder (GC, SIGSTOP) can outlive its lease: fence your
//     writes (see package lock).
//
// How each operation works (spare leases, Extend with another ttl,
// watches, nested Txns) and what it costs: docs/etcd.md.
package etcdlock
