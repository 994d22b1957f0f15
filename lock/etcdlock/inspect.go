package etcdlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Inspect implements lock.Inspector in two round trips: the key's grants,
// then their leases' remaining ttl (whole seconds, rounded down). Of
// several shares it reports the one that expires first.
func (l *Lock) Inspect(ctx context.Context, key string) (lock.Grant, bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return lock.Grant{}, false, err
	}
	start := l.keyStart(key)
	r, err := l.client.Get(requireLeader(ctx), start, clientv3.WithRange(start+holdEndMark))
	if err != nil {
		return lock.Grant{}, false, backendkit.Unavailable("etcdlock: inspect", err)
	}
	if len(r.Kvs) == 0 {
		return lock.Grant{}, false, nil
	}
	gs, err := l.grants(ctx, r.Kvs)
	if err != nil || len(gs) == 0 {
		return lock.Grant{}, false, err
	}
	first := gs[0]
	for _, g := range gs[1:] {
		if g.Remaining < first.Remaining {
			first = g
		}
	}
	return first, true, nil
}

// listPage is how many keys one range read of List returns, and
// leasePool how many lease ttls it reads at once: no List call reads more
// than a page, whatever the number of grants.
const (
	listPage  = 1000
	leasePool = 8
)

// List implements lock.Inspector: range reads of the keys under prefix,
// listPage keys each (sorted by key, as etcd returns them; one Grant per
// share, writers' intent keys left out), then the remaining ttl of each
// distinct lease among them (the grants of a batch share theirs), read
// leasePool at a time.
func (l *Lock) List(ctx context.Context, prefix string) ([]lock.Grant, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	from := l.prefix + escape(prefix)
	end := clientv3.GetPrefixRangeEnd(from)
	ttls := map[int64]int64{}
	var out []lock.Grant
	for {
		r, err := l.client.Get(requireLeader(ctx), from, clientv3.WithRange(end), clientv3.WithLimit(listPage))
		if err != nil {
			return nil, backendkit.Unavailable("etcdlock: list", err)
		}
		gs, err := l.grantsWith(ctx, r.Kvs, ttls)
		if err != nil {
			return nil, err
		}
		out = append(out, gs...)
		if !r.More || len(r.Kvs) == 0 {
			return out, nil
		}
		from = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// grants turns key-values into grants, dropping those whose lease has just
// ended (the key is being deleted) and those this package did not write.
func (l *Lock) grants(ctx context.Context, kvs []*mvccpb.KeyValue) ([]lock.Grant, error) {
	return l.grantsWith(ctx, kvs, map[int64]int64{})
}

// grantsWith is grants with ttls, the remaining ttl of the leases already
// read (lease: ttl), which it completes.
func (l *Lock) grantsWith(ctx context.Context, kvs []*mvccpb.KeyValue, ttls map[int64]int64) ([]lock.Grant, error) {
	type found struct {
		g     lock.Grant
		lease int64
	}
	var fs []found
	var missing []int64
	for _, kv := range kvs {
		ek := string(kv.Key)
		key, kind, ok := parseKey(ek[len(l.prefix):])
		if !ok || kind == kindIntent || kv.Lease == 0 {
			continue
		}
		v, ok := parseValue(string(kv.Value))
		if !ok {
			continue
		}
		g := lock.Grant{Key: key, Owner: v.owner, Token: uint64(kv.CreateRevision), Since: v.since, Shared: kind == kindShare}
		if v.group {
			g.Group = ek[len(ek)-idLen:]
		}
		fs = append(fs, found{g, kv.Lease})
		if _, ok := ttls[kv.Lease]; !ok {
			ttls[kv.Lease] = 0
			missing = append(missing, kv.Lease)
		}
	}
	var (
		mu       sync.Mutex
		firstErr error
		next     = make(chan int64)
		wg       sync.WaitGroup
	)
	for range min(leasePool, len(missing)) {
		wg.Go(func() {
			for id := range next {
				r, err := l.client.TimeToLive(ctx, clientv3.LeaseID(id))
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				} else if err == nil {
					ttls[id] = r.TTL
				}
				mu.Unlock()
			}
		})
	}
	for _, id := range missing {
		next <- id
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, backendkit.Unavailable("etcdlock: lease ttl", firstErr)
	}
	var res []lock.Grant
	for _, f := range fs {
		if ttl := ttls[f.lease]; ttl >= 0 {
			f.g.Remaining = leaseRemaining(ttl)
			res = append(res, f.g)
		}
	}
	return res, nil
}

// grantValue is a grant's value, "<granted at>|<lease end>|<owner>" (µs
// since the epoch), after groupMark for a group's grant and batchMark for
// a batch's.
type grantValue struct {
	since, end time.Time
	owner      string
	group      bool
	batch      bool // on a lease shared by other grants: ForceRelease leaves it
}

// parseValue reads a grant's value.
func parseValue(value string) (grantValue, bool) {
	group := strings.HasPrefix(value, groupMark)
	value = strings.TrimPrefix(value, groupMark)
	batch := strings.HasPrefix(value, batchMark)
	value = strings.TrimPrefix(value, batchMark)
	at, rest, ok := strings.Cut(value, "|")
	if !ok {
		return grantValue{}, false
	}
	end, owner, ok := strings.Cut(rest, "|")
	if !ok {
		return grantValue{}, false
	}
	us, err1 := strconv.ParseInt(at, 10, 64)
	eus, err2 := strconv.ParseInt(end, 10, 64)
	if err1 != nil || err2 != nil {
		return grantValue{}, false
	}
	return grantValue{since: time.UnixMicro(us), end: time.UnixMicro(eus), owner: owner, group: group, batch: batch}, true
}

// leaseRemaining converts a remaining lease ttl as etcd reports it (whole
// seconds, rounded down; -1 for a lease that is gone) to a duration: under
// a second counts as half a second.
func leaseRemaining(ttl int64) time.Duration {
	switch {
	case ttl > 0:
		return time.Duration(ttl) * time.Second
	case ttl == 0:
		return 500 * time.Millisecond
	}
	return time.Millisecond
}

// ForceRelease deletes key's grants whoever holds them (the exclusive
// grant, or every share), then revokes their leases; it reports whether
// there was a grant. The deletion wakes the key's waiters through their
// watch. A holder learns of it at once (LossNotifier, through its Lock's
// watch) or at its next Extend (the lease is gone) or Release (the key is
// gone). Each delete is a Txn on the create revision and lease that were
// read, so a newer grant made in between is left alone; a lease is revoked
// only after its delete succeeded, when no Release of the holder can hand
// it back to a spare pool any more. A revoke that fails is tried once more
// in the background, and ForceRelease returns true with an error matching
// lock.ErrUnavailable: until a revoke succeeds, the holder renews its
// lease and its Extends succeed, unless it watches its loss (Lost). An
// operator's tool: fencing still protects the resource from the evicted
// holder, which may have been paused mid-write. A group's grant is deleted with its lease, which
// deletes the group's other keys too. A batch's grant (see NewBatch) is
// deleted alone: its lease is shared by the batch's other grants, and its
// holder learns of the deletion at its next Renew or Extend, which read
// the key.
func (l *Lock) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return false, err
	}
	start := l.keyStart(key)
	r, err := l.client.Get(requireLeader(ctx), start, clientv3.WithRange(start+holdEndMark))
	if err != nil {
		return false, backendkit.Unavailable("etcdlock: force release", err)
	}
	found := false
	var revokeErrs []error
	for _, kv := range r.Kvs {
		ekey := string(kv.Key)
		t, err := l.client.Txn(requireLeader(ctx)).If(
			clientv3.Compare(clientv3.CreateRevision(ekey), "=", kv.CreateRevision),
			clientv3.Compare(clientv3.LeaseValue(ekey), "=", kv.Lease),
		).Then(clientv3.OpDelete(ekey)).Commit()
		switch {
		case err != nil:
			return found, backendkit.Unavailable("etcdlock: force release", err)
		case !t.Succeeded:
			continue // released or expired meanwhile
		}
		found = true
		if v, _ := parseValue(string(kv.Value)); kv.Lease != 0 && !v.batch {
			if _, err := l.client.Revoke(requireLeader(ctx), clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				// The key is gone, but the holder renews its lease: its
				// Extends succeed until its Lock's watch (Lost) or its
				// Release tells it. Try again past ctx, and say so.
				l.revokeLater(clientv3.LeaseID(kv.Lease))
				revokeErrs = append(revokeErrs, err)
			}
		}
	}
	if len(revokeErrs) > 0 {
		return found, backendkit.Unavailable("etcdlock: force release: the grant is deleted, but its holder's lease could not be revoked "+
			"(it is tried once more in the background): until it is, the holder's Extends may succeed", errors.Join(revokeErrs...))
	}
	return found, nil
}
