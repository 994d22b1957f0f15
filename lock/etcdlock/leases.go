package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Spare leases. An acquire needs a lease before its Txn; granting it first
// would cost a second round trip. So each Lock keeps unused leases per ttl,
// granted in the background, and puts back the lease of a failed attempt
// or of a released grant for the next one. A lease's ttl runs from its
// grant: a spare is used only while it still covers the requested ttl
// (give or take a tenth of it, at most 500 ms), and ValidUntil counts from
// the spare's grant when that ends first.

// spare is a lease that no key is attached to.
type spare struct {
	id      clientv3.LeaseID
	sec     int64         // the ttl asked for, in seconds: the pool's index
	granted time.Duration // the ttl the server granted (it may raise sec)
	sent    time.Time     // when the grant request was sent
}

// end is the earliest the lease can end (a renewal moves it later).
func (s spare) end() time.Time { return s.sent.Add(s.granted) }

// tolerance is how much less than ttl a spare may still cover: a tenth of
// it, at most 500 ms.
func tolerance(ttl time.Duration) time.Duration { return min(ttl/10, 500*time.Millisecond) }

// covers reports whether s still covers ttl from now, less slack.
func (s spare) covers(ttl, slack time.Duration, now time.Time) bool {
	return !s.sent.Add(s.granted).Before(now.Add(ttl - slack))
}

// lease returns the freshest spare for sec that covers ttl, or grants a
// lease now when there is none. It starts a background grant when it
// leaves the pool empty or when the spare it takes has used up half its
// tolerance: under steady use a fresh spare is pooled before the one in
// use goes stale, and no acquire waits for a grant. Stale spares are
// revoked in the background.
func (l *Lock) lease(ctx context.Context, sec int64, ttl time.Duration) (spare, error) {
	now := time.Now()
	tol := tolerance(ttl)
	l.poolMu.Lock()
	if l.closed {
		l.poolMu.Unlock()
		return spare{}, fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errClosed)
	}
	var (
		got   spare
		best  = -1
		stale []clientv3.LeaseID
	)
	ss := l.spares[sec]
	for i := 0; i < len(ss); {
		if !ss[i].covers(ttl, tol, now) {
			stale = append(stale, ss[i].id)
			ss[i] = ss[len(ss)-1]
			ss = ss[:len(ss)-1]
			continue
		}
		if best < 0 || ss[i].sent.After(ss[best].sent) {
			best = i
		}
		i++
	}
	if best >= 0 {
		got = ss[best]
		ss[best] = ss[len(ss)-1]
		ss = ss[:len(ss)-1]
	}
	l.spares[sec] = ss
	if best < 0 || len(ss) == 0 || !got.covers(ttl, tol/2, now) {
		l.refillLocked(sec)
	}
	l.poolMu.Unlock()
	for _, id := range stale {
		l.revokeLater(id)
	}
	if best >= 0 {
		return got, nil
	}
	s, err := l.grant(ctx, sec)
	if err != nil {
		return spare{}, backendkit.Unavailable("etcdlock: lease grant", err)
	}
	return s, nil
}

func (l *Lock) grant(ctx context.Context, sec int64) (spare, error) {
	sent := time.Now()
	r, err := l.client.Grant(requireLeader(ctx), sec)
	if err != nil {
		return spare{}, err
	}
	return spare{id: r.ID, sec: sec, granted: time.Duration(r.TTL) * time.Second, sent: sent}, nil
}

// refillLocked starts a background grant for sec unless one is under way.
// poolMu is held.
func (l *Lock) refillLocked(sec int64) {
	if l.closed || l.filling[sec] {
		return
	}
	l.filling[sec] = true
	l.bg.Go(func() {
		ctx, cancel := context.WithTimeout(l.ctx, bgTimeout)
		s, err := l.grant(ctx, sec)
		cancel()
		l.poolMu.Lock()
		l.filling[sec] = false
		l.poolMu.Unlock()
		if err != nil {
			l.log.Debug("leasehold: etcdlock spare lease grant failed", "ttl_s", sec, "err", err)
			return
		}
		l.giveBack(s)
	})
}

// giveBack pools an unused lease, or revokes it when the pool is full or
// closed.
func (l *Lock) giveBack(s spare) {
	l.poolMu.Lock()
	ok := !l.closed && len(l.spares[s.sec]) < maxSpares
	if ok {
		l.spares[s.sec] = append(l.spares[s.sec], s)
	}
	l.poolMu.Unlock()
	if !ok {
		l.revokeLater(s.id)
	}
}

// revokeLater revokes a lease in the background: a leftover of a failed
// attempt or a stale spare. If it fails, the lease expires with its ttl.
func (l *Lock) revokeLater(id clientv3.LeaseID) {
	l.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), bgTimeout)
		defer cancel()
		if _, err := l.client.Revoke(requireLeader(ctx), id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			l.log.Debug("leasehold: etcdlock lease revoke failed; it expires with its ttl", "lease", int64(id), "err", err)
		}
	})
}
