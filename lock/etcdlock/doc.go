// Package etcdlock is the etcd backend of leasehold: a lock.Lock on a
// go.etcd.io/etcd/client/v3 client, for a single etcd server or a cluster.
// Of the network backends it gives the strongest guarantee: a grant is a
// Raft-replicated write, so it survives the loss of any minority of the
// cluster's members, including the leader.
//
// # How it works
//
// A user's key k is the etcd key prefix+k (WithPrefix; DefaultPrefix by
// default), whose value is "<granted at, µs>|<owner>".
//
//   - Acquire is one Txn: if the key's create revision is 0 (it does not
//     exist), put it attached to a lease of its own; else read the holder.
//     The fencing token is the key's create revision, which etcd makes
//     strictly increasing and keeps across restarts. When the key is held,
//     a second request reads the holder's remaining lease ttl, the hint
//     lock.Acquire sleeps no longer than.
//   - The lease is granted ahead of time: each Lock keeps a few unused
//     leases per ttl ("spares", granted in the background), so an
//     uncontended acquire is one round trip. A failed attempt puts its
//     lease back for the next one; Close revokes the spares. A spare is
//     used only while its lease, which runs from its own grant, still
//     covers the requested ttl to within a tenth of it (at most 500 ms);
//     an older one is revoked and a lease granted on the spot (two round
//     trips: the first acquire after a pause of more than ~0.5 s).
//   - Release is one Txn: delete the key if its create revision and lease
//     are still this grant's. The lease, now without a key, goes back to
//     the spares for a later grant, so an acquire–release cycle costs
//     two writes, as etcd's own concurrency.Mutex does; revoking it and
//     granting a new one would cost a third. A lease is never shared by
//     two live grants. When the outcome of a Release is unknown, the lease
//     is revoked in the background, which deletes the key if it is still
//     there.
//   - Extend is one keepalive of the grant's lease (KeepAliveOnce) when
//     the ttl rounds to the lease's seconds. For another ttl it moves the
//     key to a lease of that ttl (see below).
//   - Waiting: one watch per Lock on the whole prefix, for deletions only
//     (a Release, an expiry, an operator's delete), made on first use and
//     shared by every waiter. Subscribe returns once the watch is
//     established on the server, so no release after it is missed. The
//     watch starts at the current revision: it is "synced" on the server
//     and gets events at once (a watch from an old revision is served
//     every 100 ms until it catches up: that is why concurrency.Mutex
//     waiters take ~100 ms per handoff). When the watch breaks (its member
//     lost the leader, the connection dropped) every waiter is woken to
//     try again and the watch is made again.
//   - TryAcquireAny is one Txn too (for up to 64 keys; see the limits): its
//     else branch nests a Txn for the next key (etcd ≥ 3.3), one level per
//     key from a random start, so the first free key in that order is put
//     and no other is touched.
//   - Inspect and List read the keys (List with one range read of the
//     prefix) and their leases' remaining ttl (one request per lease).
//   - Handles implement lock.LossNotifier: Lost is closed when a renewal
//     or release finds the lease gone, or when the Lock's watch sees the
//     grant's key deleted by anything but its Release.
//
// # ttl, minimum and validity
//
// etcd leases count whole seconds, and etcd will not expire a lease sooner
// than ceil(1.5 × its election timeout): 2 s with the default 1 s election
// timeout; a shorter lease is silently raised. So a ttl is rounded up to
// whole seconds and to the minimum (DefaultMinTTL, 2 s; WithMinTTL lowers
// it to 1 s for servers with a short election timeout). Rounding is not an
// error: only a ttl ≤ 0 (or above MaxTTL) is refused.
//
// Limits (lock.Limited; out of them, an error matching
// lock.ErrInvalidArgument, before anything is sent):
//
//   - ttl: above 0 (rounded up to whole seconds and MinTTL) to MaxTTL
//     (lock.MaxTTL, 366 days), at every entry point;
//   - keys per TryAcquireAny or Subscribe: MaxKeys (lock.MaxKeys, 4096).
//     etcd refuses a Txn of more than --max-txn-ops operations (128 by
//     default) counted down its nested levels, two per key: TryAcquireAny
//     sends Txns of at most 64 keys each, one after the other until one
//     grants a key (each Txn puts at most one key, so the first free key in
//     order is granted), and halves that batch for good when a server run
//     with a smaller --max-txn-ops refuses it. Over many held keys it costs
//     one round trip per 64 keys, and the hint asks about at most 16 of
//     the holders' leases;
//   - key: 1 to lock.MaxKeyLen bytes (under the prefix).
//
// ValidUntil still counts the ttl that was asked for, from the time the
// acquire or extend request was sent, minus lock.DriftAllowance — not from
// the reply, and not etcd's own keepalive deadline, which counts from the
// reply and so fires late. It never claims more than the lease: when the
// spare lease was granted earlier, its end counts from its own grant.
//
// A lease is renewed for the ttl it was granted with; etcd cannot change
// it. So Extend(ttl) with a ttl of other whole seconds moves the key to a
// lease of that ttl: one Txn, guarded by the key's create revision and its
// current lease, puts the key with the new lease and its old value (the
// create revision, and so the token, stays), and the old lease is revoked
// in the background. The new lease comes from the spares or costs a grant
// round trip. If the Txn's outcome is unknown, the key is on one of the
// two leases: ValidUntil is the earlier of their ends, and the next Extend
// reads the key to learn which, keeps that lease and revokes the other.
// Renewing with the acquire's ttl stays one round trip.
//
// A crashed holder's key is deleted when its lease expires: the lease ttl
// (the rounded ttl) after its last renewal, plus up to 500 ms (etcd checks
// for expired leases twice a second), and the watch wakes the waiters at
// once.
//
// # What etcd promises, and what it costs
//
//   - Leader changes extend leases: a newly elected leader restarts every
//     lease's countdown (it cannot know how much of it ran under the old
//     leader). A grant is never shortened by a failover, but a crashed
//     holder's key may stay held for up to another full ttl (plus the
//     election) after a leader change. The holder's ValidUntil is
//     unaffected: it is a lower bound.
//   - A stopped follower changes nothing for a client that can reach the
//     others (give the client every endpoint).
//   - Quorum loss: with a majority of members down, nothing is granted,
//     renewed or released — requests fail with lock.ErrUnavailable when
//     their context ends (give every call a deadline: the etcd client
//     otherwise waits for the cluster). A holder under lock.Keep is told
//     the grant is lost at its ValidUntil, since no renewal succeeds.
//     No one else can be granted the key either: when the quorum returns,
//     the new leader restarts the old lease's countdown, so the key stays
//     held until the old holder releases it or one more ttl passes.
//   - Tokens are revisions of the whole keyspace: strictly increasing per
//     key, across restarts and leader changes, but not consecutive.
//   - An unreachable server: clientv3 waits for a connection as long as the
//     context allows; every operation then returns lock.ErrUnavailable
//     wrapping the context's error. Give the client a DialTimeout too.
//   - A paused holder (GC, SIGSTOP) can outlive its lease: that is what
//     fencing tokens are for (see package lock).
//
// Costs: one Txn per acquire and per release, one keepalive per renewal;
// a release wakes every Lock that waits on any key of the prefix through
// its watch, and each wakes only its waiters of that key.
package etcdlock
