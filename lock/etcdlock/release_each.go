package etcdlock

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// releasesPerTxn is the most deletes of one ReleaseEach Txn: etcd's
// default --max-txn-ops (128). A server run with a smaller one refuses
// the Txn before doing anything; ReleaseEach then halves its chunk.
var releasesPerTxn = 128

var _ lock.EachReleaser = (*Lock)(nil)

// ReleaseEach implements lock.EachReleaser: the grant keys of this Lock's
// handles (exclusive grants, shares, batch grants) are deleted in Txns of
// at most 128 deletes, one round trip per Txn, sent one after the other;
// each handle is then settled as its Release settles it (its lease given
// back or revoked, a batch's grant detached) and the key's watchers see
// the delete as they see Release's. A handle released before gets
// lock.ErrLost without a call; a handle of another Lock (or a group's)
// gets an error matching lock.ErrInvalidArgument and is left alone. An
// error that stops a Txn (the server unreachable) is, wrapped in
// lock.ErrUnavailable, the outcome of its handles and of every later one.
func (l *Lock) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	errs := make([]error, len(hs))
	if err := backendkit.CheckContext(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	type started struct {
		i      int
		h      *handle
		moving *spare
	}
	todo := make([]started, 0, len(hs))
	for i, h := range hs {
		eh, ok := h.(*handle)
		if !ok || eh.l != l {
			errs[i] = fmt.Errorf("%w: etcdlock: ReleaseEach of a handle of another Lock (%T)", lock.ErrInvalidArgument, h)
			continue
		}
		moving, err := eh.startRelease(ctx)
		if err != nil {
			errs[i] = err
			continue
		}
		todo = append(todo, started{i, eh, moving})
	}
	chunk := releasesPerTxn
	var stop error // ends the Txns: the outcome of the rest
	for len(todo) > 0 {
		n := min(len(todo), chunk)
		part := todo[:n]
		deleted := make([]int64, n)
		err := stop
		if err == nil {
			ops := make([]clientv3.Op, n)
			for j, s := range part {
				ops[j] = clientv3.OpDelete(s.h.ekey)
			}
			var resp *clientv3.TxnResponse
			resp, err = l.client.Txn(requireLeader(ctx)).Then(ops...).Commit()
			if errors.Is(err, rpctypes.ErrTooManyOps) && n > 1 {
				chunk = n / 2 // refused whole, before anything was done
				continue
			}
			if err == nil {
				for j := range part {
					if d := resp.Responses[j].GetResponseDeleteRange(); d != nil {
						deleted[j] = d.Deleted
					}
				}
			} else {
				stop = err
			}
		}
		for j, s := range part {
			errs[s.i] = s.h.endRelease(ctx, s.moving, deleted[j], err)
		}
		todo = todo[n:]
	}
	return errs
}
