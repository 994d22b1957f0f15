package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// handle is one grant: the key, attached to a lease of its own.
type handle struct {
	l     *Lock
	key   string
	ekey  string
	token uint64    // the key's create revision
	since time.Time // when the acquire was sent: the value's granted at

	op    sync.Mutex // serialises Extend and Release
	lease spare      // the grant's lease; sent and granted change with Extend (under op)
	// moving is the lease of a swap whose outcome is unknown (under op): the
	// key is attached to it or to lease. The next Extend finds out which.
	moving *spare
	// batch and bl are the batch and its lease a batch grant was made on
	// (nil for other grants; see batch.go).
	batch *batch
	bl    *batchLease

	mu         sync.Mutex
	validUntil time.Time
	released   bool
	onShared   bool          // the key rests on bl, and is counted there (under mu)
	isLost     bool          // the grant was seen gone (under mu)
	lost       chan struct{} // made by the first Lost, closed once lost (under mu)
}

var _ lock.LossNotifier = (*handle)(nil)

func (h *handle) Key() string   { return h.key }
func (h *handle) Token() uint64 { return h.token }

func (h *handle) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Lost implements lock.LossNotifier: the channel is closed when this Lock
// sees the grant end without a Release: a renewal or release that finds
// the lease gone, or, through the Lock's release watch (started by the
// first call to Lost), the key's deletion by expiry, a revoke or an
// operator. Once the watch runs, the first call also looks the key up
// once (in the background), so that a deletion the watch came too late
// for — before that call, or while the watch was being made — is seen
// too; after a break of the watch, every such grant's key is looked up
// again.
func (h *handle) Lost() <-chan struct{} {
	h.mu.Lock()
	first := h.lost == nil
	if first {
		h.lost = make(chan struct{})
		if h.isLost {
			close(h.lost)
		}
	}
	lost, watch := h.lost, first && !h.released && !h.isLost
	h.mu.Unlock()
	if watch {
		h.l.watchLoss(h)
	}
	return lost
}

// markLost records that the grant is gone and closes Lost's channel.
func (h *handle) markLost() {
	h.mu.Lock()
	if !h.isLost {
		h.isLost = true
		if h.lost != nil {
			close(h.lost)
		}
	}
	h.mu.Unlock()
	if h.bl != nil {
		h.detach()
	}
}

func (h *handle) lostErr(what string) error {
	return fmt.Errorf("%w: %s of %q (token %d): the grant is gone", lock.ErrLost, what, h.key, h.token)
}

// Extend implements lock.Handle. For the ttl the lease was granted with
// (in whole seconds, as acquire rounded it) it is one round trip: a
// keepalive of the grant's lease. An etcd lease cannot be renewed for
// another ttl, so for a different one Extend moves the key to a lease of
// that ttl in one Txn, guarded by the key's create revision and current
// lease (a put that keeps the create revision, so the token does not
// change, and writes the new lease's end into the value), and revokes the
// old lease. That costs a lease grant
// too, unless a spare of that ttl is pooled. When the Txn's outcome is
// unknown, the key is on one of the two leases: ValidUntil is the earlier
// of their ends, and the next Extend reads the key to settle which. A
// batch's grant on its batch's lease is renewed by a keepalive and a read
// of its key (it may be deleted while the shared lease lives); a move
// leaves the shared lease alone.
func (h *handle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := limits.CheckTTL(ttl); err != nil {
		return err
	}
	var released bool
	lost, err := begin(ctx, &h.op, &h.mu, func() bool { released = h.released; return released || h.isLost })
	if err != nil {
		return err
	}
	defer h.op.Unlock()
	if released {
		return h.lostErr("extend after release")
	}
	if lost { // the release watch saw the key deleted, or a renewal the lease gone
		return h.lostErr("extend")
	}
	if h.moving != nil {
		if err := h.settle(ctx); err != nil {
			return err
		}
	}
	if sec := h.l.leaseSeconds(ttl); sec != h.lease.sec {
		return h.swap(ctx, sec, ttl)
	}
	vu, err := h.l.renew(ctx, &h.lease, ttl)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		h.markLost()
		return h.lostErr("extend")
	}
	if err != nil {
		return err
	}
	if h.isShared(h.lease.id) { // a batch's lease: the key may be gone while it lives
		h.batch.renewed(h.bl, h.lease.sent, int64(h.lease.granted/time.Second))
		if err := h.checkKey(ctx); err != nil {
			return err
		}
	}
	h.mu.Lock()
	h.validUntil = vu
	h.mu.Unlock()
	return nil
}

// swap moves the key to a lease of sec seconds (op held).
func (h *handle) swap(ctx context.Context, sec int64, ttl time.Duration) error {
	s, err := h.l.lease(ctx, sec, ttl)
	if err != nil {
		return err
	}
	if h.bl != nil {
		h.detach() // leaving the batch's lease (Renew now leaves it to Extend)
	}
	sent := time.Now()
	r, err := h.l.client.Txn(requireLeader(ctx)).If(
		clientv3.Compare(clientv3.CreateRevision(h.ekey), "=", int64(h.token)),
		clientv3.Compare(clientv3.LeaseValue(h.ekey), "=", int64(h.lease.id)),
	).Then(clientv3.OpPut(h.ekey, h.l.value(h.since, s.end()), clientv3.WithLease(s.id))).Commit()
	switch {
	case err != nil:
		h.moving = &s
		vu := backendkit.ValidUntil(s.sent, s.granted)
		h.mu.Lock()
		if vu.Before(h.validUntil) {
			h.validUntil = vu
		}
		h.mu.Unlock()
		return backendkit.Unavailable("etcdlock: extend (moving the key to a lease of the new ttl)", err)
	case !r.Succeeded:
		h.l.giveBack(s)
		h.markLost()
		return h.lostErr("extend")
	}
	old := h.lease
	h.lease = s
	h.dropLease(old.id) // no key is attached to it any more
	vu := validUntil(sent, ttl, s)
	h.mu.Lock()
	h.validUntil = vu
	h.mu.Unlock()
	return nil
}

// settle finds out which lease the key is on after a swap with an unknown
// outcome, keeps that one and revokes the other (op held). A read that
// finds the key on the old lease does not prove the swap will not land
// after it (proposed, not yet applied): the new lease is revoked first,
// and the key read again. settle trusted the first read and revoked the
// new lease in the background: a swap applied in between moved the key
// onto it, the revoke deleted it, and another client took it while this
// handle's Extends (keep-alives of the old lease) went on succeeding.
func (h *handle) settle(ctx context.Context) error {
	r, err := h.l.client.Get(requireLeader(ctx), h.ekey)
	if err != nil {
		return backendkit.Unavailable("etcdlock: extend (reading the key after an unknown outcome)", err)
	}
	moving := *h.moving
	h.moving = nil
	if len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != int64(h.token) {
		h.l.revokeLater(moving.id)
		h.markLost()
		return h.lostErr("extend")
	}
	switch clientv3.LeaseID(r.Kvs[0].Lease) {
	case moving.id:
		h.dropLease(h.lease.id)
		h.lease = moving
	default:
		// The move may still be on its way: end its lease first (a put on
		// a revoked lease fails whole), then read again.
		if _, err := h.l.client.Revoke(requireLeader(ctx), moving.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			h.moving = &moving
			return backendkit.Unavailable("etcdlock: extend (revoking the lease of an unknown move)", err)
		}
		r, err := h.l.client.Get(requireLeader(ctx), h.ekey)
		if err != nil {
			h.moving = &moving // read again at the next Extend: the move may have landed before the revoke
			return backendkit.Unavailable("etcdlock: extend (reading the key after an unknown outcome)", err)
		}
		if len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != int64(h.token) || clientv3.LeaseID(r.Kvs[0].Lease) != h.lease.id {
			h.markLost()
			return h.lostErr("extend")
		}
	}
	return nil
}

// Release implements lock.Handle in one round trip: a delete of the
// grant key, which names this grant alone (no later grant has it), so it
// needs no compare. The deletion wakes the waiters watching the key. The
// lease, now without a key, goes back to the Lock's spares for a later
// grant (see the package documentation); when the outcome is unknown it
// is revoked instead, which deletes the key if the delete did not. A
// batch's grant leaves its lease, shared with the batch's other grants,
// alone: an unknown outcome deletes the key again in the background.
func (h *handle) Release(ctx context.Context) error {
	moving, err := h.startRelease(ctx)
	if err != nil {
		return err
	}
	r, err := h.l.client.Delete(requireLeader(ctx), h.ekey)
	var deleted int64
	if r != nil {
		deleted = r.Deleted
	}
	return h.endRelease(ctx, moving, deleted, err)
}

// startRelease begins a Release (ReleaseEach's too): it takes op (which
// endRelease gives back) and detaches the grant; it returns the lease of a
// move to revoke once the key is deleted, if there is one.
func (h *handle) startRelease(ctx context.Context) (moving *spare, err error) {
	if err := beginRelease(ctx, &h.op, &h.mu, &h.released); err != nil {
		return nil, h.releaseErr(err)
	}
	h.l.unwatchLoss(h)
	if h.bl != nil {
		h.detach()
	}
	// The key is on one of two leases: the other goes after the delete.
	moving, h.moving = h.moving, nil
	return moving, nil
}

// endRelease ends a Release whose delete of the key answered deleted (the
// keys deleted) or err, and gives op back.
func (h *handle) endRelease(ctx context.Context, moving *spare, deleted int64, err error) error {
	defer h.op.Unlock()
	if moving != nil {
		defer h.l.revokeLater(moving.id)
	}
	switch {
	case err != nil && h.isShared(h.lease.id):
		h.l.deleteLater(h.ekey) // the lease is the batch's: the key alone goes
		err = backendkit.Unavailable("etcdlock: release", err)
	case err != nil:
		h.l.revokeLater(h.lease.id)
		err = backendkit.Unavailable("etcdlock: release", err)
	case deleted == 0:
		h.markLost()
		h.dropLease(h.lease.id) // expired already, or the key was deleted behind our back
		err = h.lostErr("release")
	case !h.isShared(h.lease.id):
		h.l.giveBack(h.lease)
	}
	h.l.metrics.Release(ctx, err)
	return err
}

// begin starts an Extend or a Release of a grant or group: it checks ctx,
// takes op (the caller unlocks it unless begin fails) and runs state under
// mu, returning its answer.
func begin(ctx context.Context, op, mu *sync.Mutex, state func() bool) (bool, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return false, err
	}
	op.Lock()
	mu.Lock()
	defer mu.Unlock()
	return state(), nil
}

// errAgain is beginRelease's answer to a second Release.
var errAgain = errors.New("second release")

// beginRelease starts a Release: it checks ctx, takes op (the caller
// unlocks it unless beginRelease fails) and marks the grant released,
// failing with errAgain if it was already.
func beginRelease(ctx context.Context, op, mu *sync.Mutex, released *bool) error {
	again, err := begin(ctx, op, mu, func() bool { r := *released; *released = true; return r })
	switch {
	case err != nil:
		return err
	case again:
		op.Unlock()
		return errAgain
	}
	return nil
}

// releaseErr is Release's error when beginRelease failed.
func (h *handle) releaseErr(err error) error {
	if err == errAgain {
		return h.lostErr("second release")
	}
	return err
}

// renew keeps lease s alive with one keepalive and returns the ValidUntil
// of a grant of ttl on it: rpctypes.ErrLeaseNotFound when the lease is
// gone, an unavailable error when the outcome is unknown.
func (l *Lock) renew(ctx context.Context, s *spare, ttl time.Duration) (time.Time, error) {
	sent := time.Now()
	r, err := l.client.KeepAliveOnce(requireLeader(ctx), s.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return time.Time{}, err
	case err != nil:
		return time.Time{}, backendkit.Unavailable("etcdlock: extend", err)
	}
	s.sent, s.granted = sent, time.Duration(r.TTL)*time.Second
	return validUntil(sent, ttl, *s), nil
}
