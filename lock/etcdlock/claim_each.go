package etcdlock

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var _ lock.EachClaimer = (*Lock)(nil)

// MaxClaimsPerTxn is the most claims of one ClaimEach Txn: one nested Txn
// per claim (a compare, a put, a read) in the outer Txn's success branch.
// etcd counts the outer Txn's operations against --max-txn-ops (128 by
// default) and each nested one's (one per branch) against what is left,
// so 127 fit (128 are refused: measured on etcd 3.4). A server run with a
// smaller --max-txn-ops refuses such a Txn before doing anything;
// ClaimEach then halves its chunk and goes on.
const MaxClaimsPerTxn = 127

// ClaimEach implements lock.EachClaimer: the claims go in Txns of at most
// MaxClaimsPerTxn claims each, one round trip per Txn, sent one after the
// other. A claim is what lock.Claim's generic path makes (TryAcquire left
// to lapse): the key's grant key on a lease of the claim's ttl, put if the
// key's range holds no grant and no share, with the claim's token its
// create revision. All the claims of one Txn have its revision as their
// token, which still exceeds every earlier grant's of each key. The claims
// of one ttl (in whole seconds) share a lease, a spare if there is one
// (so a lease per distinct ttl, granted on the spot when there is no
// spare), left to lapse. A key claimed twice in one call is claimed once:
// the second request gets ErrNotAcquired when the first was granted, else
// the first's error. A refusal's hint is the holder's lease end as its
// grant records it (no second request). An error that stops a Txn (the
// server unreachable) is the result of its claims and of every later one;
// their keys may be claimed until the ttl ends.
func (l *Lock) ClaimEach(ctx context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	res := make([]lock.ClaimResult, len(reqs))
	first := make(map[string]int, len(reqs))
	todo := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if err := backendkit.Validate(ctx, r.Key, r.TTL, limits); err != nil {
			res[i].Err = err
			continue
		}
		if _, dup := first[r.Key]; !dup {
			first[r.Key] = i
			todo = append(todo, i)
		}
	}
	c := claimer{l: l, reqs: reqs, res: res, leases: map[int64]*claimLease{}}
	c.run(ctx, todo)
	for _, sp := range c.leases {
		if sp.used {
			continue // its claims lapse with it
		}
		l.giveBack(sp.spare)
	}
	for i, r := range reqs {
		if f, ok := first[r.Key]; ok && f != i && res[i].Err == nil {
			res[i].Err = res[f].Err
			if res[i].Err == nil {
				res[i].Err = backendkit.NotAcquired(r.Key, r.TTL)
			}
		}
	}
	return res
}

// claimer is one ClaimEach call.
type claimer struct {
	l      *Lock
	reqs   []lock.ClaimRequest
	res    []lock.ClaimResult
	leases map[int64]*claimLease // by lease seconds
}

type claimLease struct {
	spare
	used bool // a claim was put on it
}

func (c *claimer) run(ctx context.Context, todo []int) {
	chunk := MaxClaimsPerTxn
	retried := false
	for len(todo) > 0 {
		n := min(len(todo), chunk)
		err := c.txn(ctx, todo[:n])
		switch {
		case errors.Is(err, rpctypes.ErrTooManyOps) && n > 1:
			chunk = n / 2 // refused whole, before anything was done
			continue
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried:
			// A spare was gone (revoked by an operator): nothing was
			// written. Once more, with new leases.
			retried = true
			clear(c.leases) // those used hold their claims, and lapse
			continue
		case err != nil:
			for _, cl := range c.leases {
				cl.used = true // the outcome is unknown: claims may rest on it; it lapses
			}
			if !errors.Is(err, lock.ErrUnavailable) {
				err = backendkit.Unavailable("etcdlock: claim", err)
			}
			for _, i := range todo {
				c.res[i].Err = err
			}
			return
		}
		todo = todo[n:]
	}
}

// txn makes the claims of idx in one Txn.
func (c *claimer) txn(ctx context.Context, idx []int) error {
	ops := make([]clientv3.Op, len(idx))
	sent := time.Now()
	for j, i := range idx {
		r := c.reqs[i]
		sp, err := c.lease(ctx, r.TTL)
		if err != nil {
			return err
		}
		cmps, then, els := txnFor([]string{c.l.grantKey(r.Key, sp.id)}, c.l.value(sent, sp.end()), sp.id)
		ops[j] = clientv3.OpTxn(cmps, then, els)
	}
	resp, err := c.l.client.Txn(requireLeader(ctx)).Then(ops...).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrLeaseNotFound):
		return err
	case err != nil:
		return backendkit.Unavailable("etcdlock: claim", err)
	}
	for j, i := range idx {
		tr := resp.Responses[j].GetResponseTxn()
		if tr != nil && tr.Succeeded {
			c.res[i].Token = uint64(resp.Header.Revision)
			c.leases[c.l.leaseSeconds(c.reqs[i].TTL)].used = true
			c.l.metrics.Attempt(ctx, sent, nil)
			continue
		}
		var hint time.Duration
		if tr != nil {
			for _, op := range tr.Responses {
				if hs := appendHolder(nil, op.GetResponseRange()); len(hs) == 1 && hs[0].end.After(sent) {
					hint = hs[0].end.Sub(sent)
				}
			}
		}
		c.res[i].Err = backendkit.NotAcquired(c.reqs[i].Key, hint)
		c.l.metrics.Attempt(ctx, sent, c.res[i].Err)
	}
	return nil
}

// lease is the call's lease for ttl: a spare, or one granted now.
func (c *claimer) lease(ctx context.Context, ttl time.Duration) (spare, error) {
	sec := c.l.leaseSeconds(ttl)
	if sp := c.leases[sec]; sp != nil {
		return sp.spare, nil
	}
	sp, err := c.l.lease(ctx, sec, ttl)
	if err != nil {
		return spare{}, err
	}
	c.leases[sec] = &claimLease{spare: sp}
	return sp, nil
}
