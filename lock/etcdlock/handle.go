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
)

// handle is one grant: the key, attached to a lease of its own.
type handle struct {
	l     *Lock
	key   string
	ekey  string
	token uint64 // the key's create revision

	op    sync.Mutex // serialises Extend and Release
	lease spare      // the grant's lease; sent and granted change with Extend (under op)

	mu         sync.Mutex
	validUntil time.Time
	released   bool

	lost     chan struct{}
	lostOnce sync.Once
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
// operator.
func (h *handle) Lost() <-chan struct{} {
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if !released {
		h.l.watchLoss(h)
	}
	return h.lost
}

func (h *handle) markLost() { h.lostOnce.Do(func() { close(h.lost) }) }

func (h *handle) lostErr(what string) error {
	return fmt.Errorf("%w: %s of %q (token %d): the grant is gone", lock.ErrLost, what, h.key, h.token)
}

// Extend implements lock.Handle in one round trip: a keepalive of the
// grant's lease, which renews it for the ttl it was granted with. An etcd
// lease cannot be renewed for another ttl, so ValidUntil counts the smaller
// of ttl and the lease's granted ttl from the send time: asking for more
// than the acquire's ttl does not buy more validity, and asking for less
// leaves the lease, and so the key after a crash, alive for its full ttl.
func (h *handle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := lock.CheckContext(ctx); err != nil {
		return err
	}
	if err := checkTTL(ttl); err != nil {
		return err
	}
	h.op.Lock()
	defer h.op.Unlock()
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if released {
		return h.lostErr("extend after release")
	}
	select {
	case <-h.lost: // the release watch saw the key deleted
		return h.lostErr("extend")
	default:
	}
	sent := time.Now()
	r, err := h.l.client.KeepAliveOnce(ctx, h.lease.id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		h.markLost()
		return h.lostErr("extend")
	case err != nil:
		return lock.Unavailable("etcdlock: extend", err)
	}
	h.lease.sent, h.lease.granted = sent, time.Duration(r.TTL)*time.Second
	vu := validUntil(sent, ttl, h.lease)
	h.mu.Lock()
	h.validUntil = vu
	h.mu.Unlock()
	return nil
}

// Release implements lock.Handle in one round trip: a Txn that deletes the
// key if it is still this grant's (same create revision, same lease). The
// deletion wakes the waiters watching the key. The lease, now without a
// key, goes back to the Lock's spares for a later grant (see the package
// documentation); when the outcome is unknown it is revoked instead, which
// deletes the key if the Txn did not.
func (h *handle) Release(ctx context.Context) error {
	if err := lock.CheckContext(ctx); err != nil {
		return err
	}
	h.op.Lock()
	defer h.op.Unlock()
	h.mu.Lock()
	released := h.released
	h.released = true
	h.mu.Unlock()
	if released {
		return h.lostErr("second release")
	}
	h.l.unwatchLoss(h)
	r, err := h.l.client.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(h.ekey), "=", int64(h.token)),
		clientv3.Compare(clientv3.LeaseValue(h.ekey), "=", h.lease.id),
	).Then(clientv3.OpDelete(h.ekey)).Commit()
	switch {
	case err != nil:
		h.l.revokeLater(h.lease.id)
		err = lock.Unavailable("etcdlock: release", err)
	case !r.Succeeded:
		h.markLost()
		h.l.revokeLater(h.lease.id) // expired already, or the key was deleted behind our back
		err = h.lostErr("release")
	default:
		h.l.giveBack(h.lease)
	}
	h.l.metrics.Release(ctx, err)
	return err
}
