package etcdlock

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Shared grants, in the manner of etcd's read-write recipe: every grant of
// a key, shared or exclusive, is a key under the key's range (keys.go),
// and its token is its create revision. Unlike the recipe nothing waits in
// a line of keys: each try is one Txn, and a waiter waits on the release
// watch. A share is put if the range holds no exclusive grant and no
// intent key; an exclusive grant if it holds no grant and no share (intent
// keys aside: any writer may take the key). An exclusive TryAcquire that
// is refused because shares hold the key puts the intent key, on a lease
// of its own of lock.IntentTTL rounded up to whole seconds and MinTTL,
// granted for it (two round trips, on that refused path only): a writer
// that tries again at least every IntentTTL/2 keeps it, and it is gone a
// lease's ttl after the last try of a writer that stopped. The writer that
// gets the key revokes the intent lease it made last (in the background),
// which deletes the intent key unless another writer has put it since.
// A lease of its own, not the attempt's spare: the spare's ttl is the
// writer's, possibly minutes, and would hold readers off that long after a
// writer gave up.

var _ lock.SharedLock = (*Lock)(nil)

// maxIntents bounds the record of intent leases; when full it starts again
// empty (an intent not revoked expires with its lease).
const maxIntents = 4096

// TryAcquireShared implements lock.SharedLock in one round trip with a
// spare lease at hand: a Txn that puts a share key of key, attached to the
// lease, if key holds no exclusive grant and no writer's intent key. A
// share is a handle like an exclusive grant (Extend, Release, ErrLost,
// loss notification); its token is its create revision. When refused, the
// error's hint is the remaining ttl of the exclusive holder or of the
// intent.
func (l *Lock) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	start := time.Now()
	h, err := l.attempt(ctx, ttl, func(sp spare) (lock.Handle, error) { return l.tryShare(ctx, key, ttl, sp) })
	l.metrics.Attempt(ctx, start, err)
	return h, err
}

func (l *Lock) tryShare(ctx context.Context, key string, ttl time.Duration, sp spare) (lock.Handle, error) {
	kstart := l.keyStart(key)
	exclEnd, ikey := kstart+exclEndMark, kstart+intentMark
	sk := l.shareKey(key, sp.id)
	sent := time.Now()
	r, err := l.client.Txn(requireLeader(ctx)).If(
		rangeEmpty(kstart, exclEnd),
		clientv3.Compare(clientv3.CreateRevision(ikey), "=", 0),
	).Then(
		clientv3.OpPut(sk, l.value(sent, sp.end()), clientv3.WithLease(sp.id)),
	).Else(
		clientv3.OpGet(kstart, clientv3.WithRange(exclEnd), clientv3.WithLimit(1)),
		clientv3.OpGet(ikey),
	).Commit()
	if err != nil {
		return nil, err
	}
	if !r.Succeeded {
		var hs []holder
		for _, op := range r.Responses {
			hs = appendHolder(hs, op.GetResponseRange())
		}
		return nil, backendkit.NotAcquired(key, l.remaining(ctx, hs, true))
	}
	return &handle{
		l: l, key: key, ekey: sk, token: uint64(r.Header.Revision), since: sent, lease: sp,
		validUntil: validUntil(sent, ttl, sp),
	}, nil
}

// markIntent puts the intent key ikey of key on a lease of its own of
// lock.IntentTTL (rounded up), and records the lease for dropIntent.
// Failures are logged only: the refusal stands either way.
func (l *Lock) markIntent(ctx context.Context, key, ikey string) {
	s, err := l.grant(ctx, l.leaseSeconds(lock.IntentTTL))
	if err == nil {
		_, err = l.client.Put(requireLeader(ctx), ikey, l.value(s.sent, s.end()), clientv3.WithLease(s.id))
		if err != nil {
			l.revokeLater(s.id)
		}
	}
	if err != nil {
		l.log.Debug("leasehold: etcdlock writer intent not marked", "key", key, "err", err)
		return
	}
	l.intentMu.Lock()
	if l.intents == nil || len(l.intents) >= maxIntents {
		l.intents = map[string]clientv3.LeaseID{}
	}
	l.intents[key] = s.id
	l.intentN.Store(int32(len(l.intents)))
	l.intentMu.Unlock()
}

// dropIntent revokes, in the background, the intent lease this Lock made
// last for key, now that it holds key exclusively. Without intents on
// record it costs an atomic load.
func (l *Lock) dropIntent(key string) {
	if l.intentN.Load() == 0 {
		return
	}
	l.intentMu.Lock()
	id, ok := l.intents[key]
	delete(l.intents, key)
	l.intentN.Store(int32(len(l.intents)))
	l.intentMu.Unlock()
	if ok {
		l.revokeLater(id)
	}
}
