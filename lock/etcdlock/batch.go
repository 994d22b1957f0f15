package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Batches (lock.Batcher). The grants of a batch share leases: up to
// BatchLeaseGrants grants rest on one lease of the batch's ttl, granted
// when the first grant needs it. A grant is its grant key on that lease,
// put by one Txn as TryAcquire puts it, but with an id of its own (a
// counter from a random start per batch) rather than the lease's, so that
// two grants of one key on one lease, one after the other, have different
// grant keys; its value starts with batchMark, which tells ForceRelease to
// delete the key alone and leave the lease, and the batch's other grants,
// be. Renew costs, per lease of the handles it is given, one keepalive
// (all of them pipelined on one LeaseKeepAlive stream: one round trip of
// wall time) and one LeaseTimeToLive with the lease's attached keys, which
// tells the grants still on it from those deleted while it lives
// (ForceRelease, an operator): 2 × ceil(N / BatchLeaseGrants) requests for
// N grants, in about one round trip of wall time.

// BatchLeaseGrants is the most grants of a batch that rest on one lease at
// a time: a renewal costs two requests per lease (a keepalive and a read
// of the lease's attached keys, at most this many), and revoking or
// expiring a lease deletes at most this many keys in one server apply.
const BatchLeaseGrants = 2000

// maxBatchWorkers bounds the goroutines of one Renew or Close: the
// LeaseTimeToLive reads, revokes, and the Extends of grants on leases of
// their own.
const maxBatchWorkers = 8

// batchMark starts the value of a grant made by a batch.
const batchMark = "b"

var (
	_ lock.Batcher = (*Lock)(nil)
	_ lock.Batch   = (*batch)(nil)

	errBatchClosed = errors.New("etcdlock: the batch is closed")
)

// batch is a lock.Batch of one Lock and one ttl.
type batch struct {
	l   *Lock
	ttl time.Duration
	sec int64
	seq atomic.Uint64 // grant ids

	mu       sync.Mutex
	leases   []*batchLease // live leases, in grant order
	granting chan struct{} // closed when the grant under way ends (nil: none)
	closed   bool
}

// batchLease is a lease shared by a batch's grants. Its fields are under
// the batch's mu.
type batchLease struct {
	id      clientv3.LeaseID
	n       int           // grants resting on it (or reserved for an acquire)
	sent    time.Time     // the last grant or keepalive known: when it was sent
	granted time.Duration // and the ttl it granted

	// strays are the grant keys of acquires on it whose outcome is
	// unknown (put): such a Txn may still land after the background
	// delete, on a lease the batch keeps alive; each Renew that reads the
	// lease's keys deletes those it finds there (readAll).
	mu     sync.Mutex
	strays []string
}

// NewBatch implements lock.Batcher: a batch whose grants are made for ttl
// and share leases, BatchLeaseGrants grants per lease, granted as the
// grants need them (NewBatch itself sends nothing).
//
// A grant is made by the batch's TryAcquire in one round trip (two when
// every lease of the batch is full, or its lease was last renewed more
// than ttl/2 ago: a lease grant or a keepalive first). Its handle is a
// full handle: Extend for the batch's ttl is a keepalive of its lease and
// a read of its key (the key may have been deleted while the lease
// lives); Extend for another ttl moves the key to a lease of its own, as
// for any grant, after which Renew renews it by that Extend, alone; its
// Release deletes its key alone, never the shared lease. Lost works as
// for any grant.
//
// Renew keeps every lease of the handles alive (one keepalive per lease,
// pipelined on one stream) and reads each lease's attached keys (one
// LeaseTimeToLive per lease, at most maxBatchWorkers at once): a grant
// whose key is gone from its living lease gets lock.ErrLost alone; a lease
// found gone ends all of its grants (ErrLost); a lease whose keepalive or
// read has no answer leaves its grants unknown (their ValidUntil stands).
// A renewed handle's ValidUntil counts the batch's ttl from the send time
// of its lease's keepalive, less the drift allowance. Close revokes the
// batch's leases, which deletes the keys still on them.
func (l *Lock) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	if err := limits.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if l.isClosed() {
		return nil, fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errClosed)
	}
	b := &batch{l: l, ttl: ttl, sec: l.leaseSeconds(ttl)}
	b.seq.Store(rand.Uint64())
	return b, nil
}

func (bl *batchLease) spare(sec int64) spare {
	return spare{id: bl.id, sec: sec, granted: bl.granted, sent: bl.sent}
}

// reserve counts a grant on a lease of the batch with room, granting a new
// lease when none has room (one grant at a time per batch).
func (b *batch) reserve(ctx context.Context) (*batchLease, spare, error) {
	for {
		if b.l.isClosed() {
			return nil, spare{}, fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errClosed)
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, spare{}, fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errBatchClosed)
		}
		for _, bl := range b.leases {
			if bl.n < BatchLeaseGrants {
				bl.n++
				sp := bl.spare(b.sec)
				b.mu.Unlock()
				return bl, sp, nil
			}
		}
		if ch := b.granting; ch != nil {
			b.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, spare{}, backendkit.CheckContext(ctx)
			}
		}
		ch := make(chan struct{})
		b.granting = ch
		b.mu.Unlock()
		s, err := b.l.grant(ctx, b.sec)
		b.mu.Lock()
		b.granting = nil
		close(ch)
		closed := b.closed
		if err == nil && !closed {
			b.leases = append(b.leases, &batchLease{id: s.id, sent: s.sent, granted: s.granted})
		}
		b.mu.Unlock()
		switch {
		case err != nil:
			return nil, spare{}, backendkit.Unavailable("etcdlock: batch lease grant", err)
		case closed:
			b.l.revokeLater(s.id)
		}
	}
}

// unreserve takes back a reservation or a grant of bl.
func (b *batch) unreserve(bl *batchLease) {
	b.mu.Lock()
	bl.n--
	b.mu.Unlock()
}

// renewed records a keepalive of bl sent at sent that granted ttl
// seconds; a ttl of 0 or less (the lease is gone) drops the lease.
func (b *batch) renewed(bl *batchLease, sent time.Time, ttl int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ttl <= 0 {
		for i, x := range b.leases {
			if x == bl {
				b.leases = append(b.leases[:i], b.leases[i+1:]...)
				break
			}
		}
		return
	}
	if sent.After(bl.sent) {
		bl.sent, bl.granted = sent, time.Duration(ttl)*time.Second
	}
}

// TryAcquire implements lock.Batch: one Txn that puts key's grant key on a
// lease of the batch if key's range holds no grant and no share, as
// Lock.TryAcquire does.
func (b *batch) TryAcquire(ctx context.Context, key string) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, b.ttl, limits); err != nil {
		return nil, err
	}
	start := time.Now()
	h, err := b.tryAcquire(ctx, key)
	b.l.metrics.Attempt(ctx, start, err)
	return h, err
}

func (b *batch) tryAcquire(ctx context.Context, key string) (lock.Handle, error) {
	for attempt := 0; ; {
		bl, sp, err := b.reserve(ctx)
		if err != nil {
			return nil, err
		}
		if !sp.covers(b.ttl, b.ttl/2, time.Now()) {
			// Not renewed for a while (no Renew yet, or none lately):
			// renew it first, so that the grant's ValidUntil is not cut short.
			sent := time.Now()
			r, err := b.l.client.KeepAliveOnce(requireLeader(ctx), bl.id)
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				b.renewed(bl, sent, 0) // expired unrenewed (its grants were released): dropped
				continue
			case err != nil:
				b.unreserve(bl)
				return nil, backendkit.Unavailable("etcdlock: acquire (renewing the batch's lease)", err)
			}
			b.renewed(bl, sent, r.TTL)
			sp.sent, sp.granted = sent, time.Duration(r.TTL)*time.Second
		}
		h, err := b.put(ctx, key, bl, sp)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0:
			// The lease is gone (revoked by an operator, or expired):
			// nothing was written. Once more, on another lease.
			attempt++
			b.renewed(bl, time.Time{}, 0)
			continue
		case err != nil:
			return nil, err
		}
		return backendkit.Deliver(h, nil)
	}
}

// put is the acquire's Txn on bl (reserved; unreserved unless granted).
func (b *batch) put(ctx context.Context, key string, bl *batchLease, sp spare) (*handle, error) {
	gk := b.l.grantKey(key, clientv3.LeaseID(b.seq.Add(1)))
	sent := time.Now()
	cmps, then, els := txnFor([]string{gk}, batchMark+b.l.value(sent, sp.end()), bl.id)
	r, err := b.l.client.Txn(requireLeader(ctx)).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		b.unreserve(bl)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return nil, err
		}
		// Unknown outcome: the key may be on the shared lease, which lives
		// on; delete it, in the background, and again if a Renew finds it
		// there later (the Txn landed after the delete).
		b.l.deleteLater(gk)
		bl.mu.Lock()
		bl.strays = append(bl.strays, gk)
		bl.mu.Unlock()
		return nil, backendkit.Unavailable("etcdlock: acquire", err)
	}
	if idx, holders := granted(r); idx < 0 {
		b.unreserve(bl)
		if len(holders) == 1 && holders[0].intent != "" {
			b.l.markIntent(ctx, key, holders[0].intent) // refused because of shares
		}
		return nil, backendkit.NotAcquired(key, b.l.remaining(ctx, holders, false))
	}
	b.l.dropIntent(key)
	return &handle{
		l: b.l, key: key, ekey: gk, token: uint64(r.Header.Revision), since: sent, lease: sp,
		batch: b, bl: bl, onShared: true,
		validUntil: validUntil(sent, b.ttl, sp),
	}, nil
}

// deleteLater deletes a grant key in the background: the leftover of an
// acquire or release with an unknown outcome on a shared lease. If it
// fails, the key lives as long as the lease.
func (l *Lock) deleteLater(ekey string) {
	l.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), bgTimeout)
		defer cancel()
		if _, err := l.client.Delete(requireLeader(ctx), ekey); err != nil {
			l.log.Debug("leasehold: etcdlock delete of a batch grant failed; it lives as long as its batch's lease", "key", ekey, "err", err)
		}
	})
}

// detach takes h off its batch lease's count, once (a grant lost,
// released, or moving to a lease of its own).
func (h *handle) detach() {
	h.mu.Lock()
	on := h.onShared
	h.onShared = false
	h.mu.Unlock()
	if on {
		h.batch.unreserve(h.bl)
	}
}

// isShared reports whether lease id is the batch lease h was made on,
// which h must neither revoke nor give back to the spares.
func (h *handle) isShared(id clientv3.LeaseID) bool { return h.bl != nil && h.bl.id == id }

// dropLease revokes a lease h no longer needs, unless it is its batch's.
func (h *handle) dropLease(id clientv3.LeaseID) {
	if !h.isShared(id) {
		h.l.revokeLater(id)
	}
}

// checkKey reads h's grant key: ErrLost unless it is still h's grant
// (Extend of a grant on a batch lease, whose key may be deleted while the
// lease lives).
func (h *handle) checkKey(ctx context.Context) error {
	r, err := h.l.client.Get(requireLeader(ctx), h.ekey, clientv3.WithKeysOnly())
	switch {
	case err != nil:
		return backendkit.Unavailable("etcdlock: extend (reading the key)", err)
	case len(r.Kvs) == 0 || r.Kvs[0].CreateRevision != int64(h.token):
		h.markLost()
		return h.lostErr("extend")
	}
	return nil
}

// renewItem is a handle of a Renew on a batch lease, and its place in hs.
type renewItem struct {
	i int
	h *handle
}

// leaseRenewal is what Renew learns of one batch lease.
type leaseRenewal struct {
	bl    *batchLease
	items []renewItem
	sent  time.Time // the keepalive's
	ttl   int64     // the keepalive's answer (0 or less: gone)
	kaErr error     // no answer to the keepalive (else it was answered)
	keys  map[string]bool
	ttlOK bool  // the read's answer: the lease lives
	rdErr error // no answer to the read
}

// Renew implements lock.Batch (see NewBatch): per lease of hs, one
// keepalive (pipelined on one stream) and one read of its attached keys,
// then an Extend of each handle on a lease of its own.
func (b *batch) Renew(ctx context.Context, hs []lock.Handle) []error {
	errs := make([]error, len(hs))
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	if err := backendkit.CheckContext(ctx); err != nil {
		return fail(err)
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return fail(fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errBatchClosed))
	}
	byLease := map[*batchLease]*leaseRenewal{}
	var order []*leaseRenewal
	var alone []renewItem
	for i, x := range hs {
		h, ok := x.(*handle)
		if !ok || h.batch != b {
			errs[i] = backendkit.Invalid("etcdlock", "a handle not made by this batch")
			continue
		}
		h.mu.Lock()
		released, lost, on := h.released, h.isLost, h.onShared
		h.mu.Unlock()
		switch {
		case released:
			errs[i] = h.lostErr("renewal after release")
		case lost:
			errs[i] = h.lostErr("renewal")
		case !on:
			alone = append(alone, renewItem{i, h})
		default:
			lr := byLease[h.bl]
			if lr == nil {
				lr = &leaseRenewal{bl: h.bl}
				byLease[h.bl] = lr
				order = append(order, lr)
			}
			lr.items = append(lr.items, renewItem{i, h})
		}
	}
	if len(order) > 0 {
		var wg sync.WaitGroup
		wg.Go(func() { b.l.keepAliveAll(ctx, order) })
		b.l.readAll(ctx, order)
		wg.Wait()
	}
	for _, lr := range order {
		switch {
		case lr.kaErr == nil:
			b.renewed(lr.bl, lr.sent, lr.ttl)
		case lr.rdErr == nil && !lr.ttlOK:
			b.renewed(lr.bl, lr.sent, 0)
		}
		alone = b.settle(lr, errs, alone)
	}
	// Grants on leases of their own, and those that left their batch
	// lease during this Renew: each by its own Extend.
	forEach(len(alone), func(j int) { errs[alone[j].i] = alone[j].h.Extend(ctx, b.ttl) })
	return errs
}

// settle sets the outcome of each handle on lr's lease, and returns alone
// with those that left the lease meanwhile.
func (b *batch) settle(lr *leaseRenewal, errs []error, alone []renewItem) []renewItem {
	gone := lr.kaErr == nil && lr.ttl <= 0 || lr.rdErr == nil && !lr.ttlOK
	vu := validUntil(lr.sent, b.ttl, spare{sent: lr.sent, granted: time.Duration(lr.ttl) * time.Second})
	for _, it := range lr.items {
		h := it.h
		var err error
		switch {
		case gone || lr.rdErr == nil && !lr.keys[h.ekey]:
			err = h.lostErr("renewal")
		case lr.kaErr != nil:
			err = backendkit.Unavailable("etcdlock: renewal (keepalive)", lr.kaErr)
		case lr.rdErr != nil:
			err = backendkit.Unavailable("etcdlock: renewal (reading the lease's keys)", lr.rdErr)
		}
		h.mu.Lock()
		on, released := h.onShared, h.released
		switch {
		case released:
			err = h.lostErr("renewal after release")
		case !on: // moving to a lease of its own: Extend settles it
			h.mu.Unlock()
			alone = append(alone, it)
			continue
		case err == nil && vu.After(h.validUntil):
			h.validUntil = vu
		}
		h.mu.Unlock()
		if errors.Is(err, lock.ErrLost) && !released {
			h.markLost()
		}
		errs[it.i] = err
	}
	return alone
}

// keepAliveAll sends one keepalive per lease on one LeaseKeepAlive stream,
// all before reading any answer, and records each answer.
func (l *Lock) keepAliveAll(ctx context.Context, lrs []*leaseRenewal) {
	ctx, cancel := context.WithCancel(requireLeader(ctx))
	defer cancel() // ends the stream
	answered := make(map[*leaseRenewal]bool, len(lrs))
	fail := func(err error) {
		for _, lr := range lrs {
			if !answered[lr] {
				lr.kaErr = err
			}
		}
	}
	stream, err := pb.NewLeaseClient(l.client.ActiveConnection()).LeaseKeepAlive(ctx)
	if err != nil {
		fail(err)
		return
	}
	byID := make(map[int64]*leaseRenewal, len(lrs))
	for _, lr := range lrs {
		byID[int64(lr.bl.id)] = lr
		lr.sent = time.Now()
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(lr.bl.id)}); err != nil {
			fail(err)
			return
		}
	}
	for range lrs {
		r, err := stream.Recv()
		if err != nil {
			fail(err)
			return
		}
		if lr := byID[r.ID]; lr != nil {
			lr.ttl = r.TTL
			answered[lr] = true
		}
	}
}

// readAll reads the attached keys of each lease, at most maxBatchWorkers
// at once.
func (l *Lock) readAll(ctx context.Context, lrs []*leaseRenewal) {
	forEach(len(lrs), func(i int) {
		lr := lrs[i]
		r, err := l.client.TimeToLive(requireLeader(ctx), lr.bl.id, clientv3.WithAttachedKeys())
		if err != nil {
			lr.rdErr = err
			return
		}
		lr.ttlOK = r.TTL >= 0 // whole seconds, rounded down: 0 is under a second left; -1 is gone
		lr.keys = make(map[string]bool, len(lr.items))
		for _, it := range lr.items {
			lr.keys[it.h.ekey] = false
		}
		for _, k := range r.Keys {
			if _, ok := lr.keys[string(k)]; ok {
				lr.keys[string(k)] = true
			}
		}
		l.deleteStrays(lr.bl, r.Keys)
	})
}

// deleteStrays deletes, in the background, the stray grant keys of bl
// (acquires of unknown outcome) among keys, the keys attached to bl: a
// grant no handle knows of, which the batch's renewals would keep alive
// with the lease, until the batch's Close. A stray lands once at most: it
// is forgotten once found.
func (l *Lock) deleteStrays(bl *batchLease, keys [][]byte) {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if len(bl.strays) == 0 {
		return
	}
	attached := make(map[string]bool, len(keys))
	for _, k := range keys {
		attached[string(k)] = true
	}
	kept := bl.strays[:0]
	for _, gk := range bl.strays {
		if attached[gk] {
			l.deleteLater(gk)
			continue
		}
		kept = append(kept, gk)
	}
	clear(bl.strays[len(kept):])
	bl.strays = kept
}

// forEach runs f(0..n-1) on at most maxBatchWorkers goroutines.
func forEach(n int, f func(i int)) {
	if n == 0 {
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, maxBatchWorkers) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// Close implements lock.Batch: it revokes the batch's leases (at most
// maxBatchWorkers at once), which deletes every grant still on them.
func (b *batch) Close(ctx context.Context) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	leases := b.leases
	b.leases = nil
	b.mu.Unlock()
	errs := make([]error, len(leases))
	forEach(len(leases), func(i int) {
		_, err := b.l.client.Revoke(requireLeader(ctx), leases[i].id)
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs[i] = err
			b.l.revokeLater(leases[i].id)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return backendkit.Unavailable("etcdlock: batch close: revoking its leases (retried in the background; else they expire with their ttl)", err)
	}
	return nil
}
