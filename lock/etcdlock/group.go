package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// All-of grants. TryAcquireAll is one Txn: a compare per key that its
// whole range is empty (no grant, no share, no writer's intent), then a
// put of every key's grant key on one lease, else a read of each range's
// first key for the error. The grant keys are those of exclusive grants;
// their values start with groupMark, and the group's id is the lease's,
// the id every one of its grant keys ends with.
//
// Tokens: all the puts of one Txn share its revision, so every key of a
// group has the same token. Per key that is all fencing asks: it exceeds
// the token of every earlier grant of that key. Tokens of different keys
// are never compared (each key's resource fences on its own key's), and
// distinct tokens would cost a Txn per key, which is no all-of grant.

var _ lock.GroupLock = (*Lock)(nil)

// MaxGroupKeys is the most keys of one TryAcquireAll: etcd's default
// --max-txn-ops (128) bounds each of the Txn's compares, puts and reads.
// A server run with a smaller --max-txn-ops refuses bigger groups, with an
// error matching lock.ErrInvalidArgument.
const MaxGroupKeys = 128

// groupMark starts the value of a group's grant.
const groupMark = "g"

// TryAcquireAll implements lock.GroupLock in one round trip with a spare
// lease at hand (see the package documentation). When some key is held,
// the error names the first held key in the order of keys, and its hint
// is the longest remaining ttl of the holders read.
func (l *Lock) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (lock.Group, error) {
	if err := backendkit.ValidateGroup(ctx, keys, ttl, limits); err != nil {
		return nil, err
	}
	start := time.Now()
	h, err := l.attempt(ctx, ttl, func(sp spare) (lock.Handle, error) { return l.tryAll(ctx, keys, ttl, sp) })
	l.metrics.Attempt(ctx, start, err)
	if err != nil {
		return nil, err
	}
	return h.(groupHandle).group, nil
}

func (l *Lock) tryAll(ctx context.Context, keys []string, ttl time.Duration, sp spare) (lock.Handle, error) {
	n := len(keys)
	cmps := make([]clientv3.Cmp, n)
	then := make([]clientv3.Op, n)
	els := make([]clientv3.Op, n)
	gks := make([]string, n)
	sent := time.Now()
	value := groupMark + l.value(sent, sp.end())
	for i, k := range keys {
		start, end := l.keyRange(k)
		gks[i] = l.grantKey(k, sp.id)
		cmps[i] = rangeEmpty(start, end)
		then[i] = clientv3.OpPut(gks[i], value, clientv3.WithLease(sp.id))
		els[i] = clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithLimit(1))
	}
	r, err := l.client.Txn(requireLeader(ctx)).If(cmps...).Then(then...).Else(els...).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return nil, fmt.Errorf("%w: %d keys are more than the server's --max-txn-ops allows in one Txn", lock.ErrInvalidArgument, n)
	case err != nil:
		return nil, err
	case !r.Succeeded:
		var hs []holder
		held := ""
		for i, op := range r.Responses {
			before := len(hs)
			hs = appendHolder(hs, op.GetResponseRange())
			if held == "" && len(hs) > before {
				held = keys[i]
			}
		}
		if held == "" { // freed between the compare and the read: none, in etcd's serial order
			held = keys[0]
		}
		return nil, backendkit.NotAcquired(held, l.remaining(ctx, hs, true))
	}
	tokens := make([]uint64, n)
	for i := range tokens {
		tokens[i] = uint64(r.Header.Revision)
	}
	return groupHandle{&group{
		l: l, keys: keys, gks: gks, tokens: tokens, since: sent, lease: sp,
		validUntil: validUntil(sent, ttl, sp),
	}}, nil
}

// group is one all-of grant: a grant key per key, all on one lease.
type group struct {
	l      *Lock
	keys   []string
	gks    []string
	tokens []uint64
	since  time.Time

	op    sync.Mutex // serialises Extend and Release
	lease spare      // under op

	mu         sync.Mutex
	validUntil time.Time
	released   bool
	lost       bool
}

func (g *group) Keys() []string      { return g.keys }
func (g *group) Tokens() []uint64    { return g.tokens }
func (g *group) Limits() lock.Limits { return limits }

func (g *group) ValidUntil() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.validUntil
}

func (g *group) setValidUntil(vu time.Time) {
	g.mu.Lock()
	g.validUntil = vu
	g.mu.Unlock()
}

func (g *group) lostErr(what string) error {
	return fmt.Errorf("%w: %s of the group %s (token %d): a grant is gone", lock.ErrLost, what, strings.Join(g.keys, ","), g.tokens[0])
}

func (g *group) markLost() {
	g.mu.Lock()
	g.lost = true
	g.mu.Unlock()
}

// Extend implements lock.Group: one keepalive of the group's lease for the
// ttl it was granted with (whole seconds); for another ttl one Txn that
// moves every key to a lease of that ttl, guarded by each key's create
// revision, then a revoke of the old lease. When that move's outcome is
// unknown both leases are revoked, which ends the group: the next Extend
// or Release returns ErrLost.
func (g *group) Extend(ctx context.Context, ttl time.Duration) error {
	if err := limits.CheckTTL(ttl); err != nil {
		return err
	}
	gone, err := begin(ctx, &g.op, &g.mu, func() bool { return g.released || g.lost })
	if err != nil {
		return err
	}
	defer g.op.Unlock()
	if gone {
		return g.lostErr("extend")
	}
	if sec := g.l.leaseSeconds(ttl); sec != g.lease.sec {
		return g.swap(ctx, sec, ttl)
	}
	vu, err := g.l.renew(ctx, &g.lease, ttl)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		g.markLost()
		return g.lostErr("extend")
	}
	if err != nil {
		return err
	}
	g.setValidUntil(vu)
	return nil
}

// swap moves every key to a lease of sec seconds (op held).
func (g *group) swap(ctx context.Context, sec int64, ttl time.Duration) error {
	s, err := g.l.lease(ctx, sec, ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	value := groupMark + g.l.value(g.since, s.end())
	cmps := make([]clientv3.Cmp, len(g.gks))
	puts := make([]clientv3.Op, len(g.gks))
	for i, gk := range g.gks {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(gk), "=", int64(g.tokens[i]))
		puts[i] = clientv3.OpPut(gk, value, clientv3.WithLease(s.id))
	}
	r, err := g.l.client.Txn(requireLeader(ctx)).If(cmps...).Then(puts...).Commit()
	switch {
	case err != nil:
		g.l.revokeLater(s.id)
		g.l.revokeLater(g.lease.id)
		g.markLost()
		g.setValidUntil(time.Time{})
		return backendkit.Unavailable("etcdlock: extend (moving the group to a lease of the new ttl; it is given up)", err)
	case !r.Succeeded:
		g.l.giveBack(s)
		g.markLost()
		return g.lostErr("extend")
	}
	g.l.revokeLater(g.lease.id) // no key is attached to it any more
	g.lease = s
	g.setValidUntil(validUntil(sent, ttl, s))
	return nil
}

// Release implements lock.Group in one round trip: a Txn that deletes
// every grant key of the group (each names this group alone). The lease
// goes back to the spares when every key was there; else it is revoked,
// and Release returns ErrLost.
func (g *group) Release(ctx context.Context) error {
	if err := beginRelease(ctx, &g.op, &g.mu, &g.released); err != nil {
		return g.releaseErr(err)
	}
	defer g.op.Unlock()
	dels := make([]clientv3.Op, len(g.gks))
	for i, gk := range g.gks {
		dels[i] = clientv3.OpDelete(gk)
	}
	r, err := g.l.client.Txn(requireLeader(ctx)).Then(dels...).Commit()
	if err != nil {
		g.l.revokeLater(g.lease.id)
		err = backendkit.Unavailable("etcdlock: release", err)
		g.l.metrics.Release(ctx, err)
		return err
	}
	deleted := 0
	for _, op := range r.Responses {
		if d := op.GetResponseDeleteRange(); d != nil {
			deleted += int(d.Deleted)
		}
	}
	if deleted < len(g.gks) {
		g.markLost()
		g.l.revokeLater(g.lease.id)
		err = g.lostErr("release")
	} else {
		g.l.giveBack(g.lease)
	}
	g.l.metrics.Release(ctx, err)
	return err
}

// groupHandle lets attempt and backendkit.Deliver treat a group as a
// Handle.
type groupHandle struct{ *group }

func (g groupHandle) Key() string   { return strings.Join(g.keys, ",") }
func (g groupHandle) Token() uint64 { return g.tokens[0] }

// releaseErr is Release's error when beginRelease failed.
func (g *group) releaseErr(err error) error {
	if err == errAgain {
		return g.lostErr("second release")
	}
	return err
}
