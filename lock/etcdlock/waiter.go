package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// The release watch. One watch per Lock covers the whole prefix, for
// deletions only: a Release (lease revoke), an expiry and an operator's
// delete all show as a DELETE event. It is made on first use and kept; a
// watch made without a start revision is "synced" on the server, so events
// reach it at once (a watch from an old revision is served only every
// 100 ms until it catches up).

type watchState struct {
	mu      sync.Mutex
	running bool               // a watch is established
	cancel  context.CancelFunc // ends the current watch
	done    chan struct{}      // closed when the watch loop has returned
	stopped bool               // Close was called
	losses  map[string]map[*handle]struct{}
}

// Subscribe implements lock.Waiter. It returns once the Lock's release
// watch is established on the server (one round trip the first time, none
// after), so a release after it returns is delivered. When the watch
// breaks (the member lost its leader, the connection dropped), every
// waiter is woken to try again, and the watch is made again.
func (l *Lock) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	if err := backendkit.ValidateSubscribe(ctx, keys, limits); err != nil {
		return nil, err
	}
	sub := l.notifier.Subscribe(keys...)
	if err := l.ensureWatch(ctx); err != nil {
		_ = sub.Close()
		return nil, err
	}
	return sub, nil
}

// ensureWatch establishes the release watch unless it runs.
func (l *Lock) ensureWatch(ctx context.Context) error {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	if l.w.stopped {
		return fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errClosed)
	}
	if l.w.running {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.ctx))
	// The client's Watch returns once the server has created the watch.
	// The watch outlives ctx, but waiting for it must not; and a watch
	// cancelled while its creation is on its way would leave the client's
	// watch stream open until the client closes (see cancelOnceMade), so
	// one that ctx gave up on is cancelled when Watch has returned.
	made := make(chan clientv3.WatchChan, 1)
	go func() {
		made <- l.client.Watch(wctx, l.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(),
			clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	}()
	var wch clientv3.WatchChan
	select {
	case wch = <-made:
	case <-ctx.Done():
		l.bg.Go(func() { cancelOnceMade(made, cancel) })
		return backendkit.Unavailable("etcdlock: watch", context.Cause(ctx))
	}
	var err error
	select {
	case resp, ok := <-wch:
		switch {
		case !ok:
			err = errors.New("watch closed before it was created")
		case resp.Err() != nil:
			err = resp.Err()
		case !resp.Created:
			err = errors.New("watch sent events before its creation notice")
		}
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		return backendkit.Unavailable("etcdlock: watch", err)
	}
	done := make(chan struct{})
	l.w.running, l.w.cancel, l.w.done = true, cancel, done
	go l.watchLoop(wch, cancel, done)
	return nil
}

// cancelOnceMade cancels a watch that its caller gave up on while the
// client's Watch was still waiting for the server to create it, once
// Watch has returned (or after bgTimeout: a server that never answers).
// Cancelled during that wait, the watch would leave the etcd client's
// watch stream open until the client closes (v3.7 watch.go): the client
// closes a stream when a watcher leaves and none is left, but such a
// watcher still counts as waiting for its creation when it leaves, and
// the creation notice later drops it without that check. That is four
// goroutines and a server watch for every Lock that met it (locktest's
// CancelStorm saw them under load; TestCancelledSubscribeLeavesNoWatchStream).
// When the Lock closes, its context ends the wait.
func cancelOnceMade(made <-chan clientv3.WatchChan, cancel context.CancelFunc) {
	defer cancel()
	t := time.NewTimer(bgTimeout)
	defer t.Stop()
	select {
	case <-made:
	case <-t.C:
	}
}

func (l *Lock) watchLoop(wch clientv3.WatchChan, cancel context.CancelFunc, done chan struct{}) {
	defer close(done)
	defer cancel()
	var err error
	for resp := range wch {
		if err = resp.Err(); err != nil {
			break
		}
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				l.deleted(ev)
			}
		}
	}
	l.w.mu.Lock()
	l.w.running = false
	stopped := l.w.stopped
	l.w.mu.Unlock()
	// Deletions may be missed until the watch is made again: wake every
	// waiter to try again instead of sleeping through them.
	l.notifier.NotifyAll()
	if stopped {
		return
	}
	l.log.Debug("leasehold: etcdlock release watch interrupted", "err", err)
	// Make it again, with backoff, unless a Subscribe does it first.
	l.bg.Go(l.rewatch)
}

func (l *Lock) rewatch() {
	wait := 20 * time.Millisecond
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(l.ctx, bgTimeout)
		err := l.ensureWatch(ctx)
		if err == nil {
			l.notifier.NotifyAll() // anything released meanwhile
			l.checkLosses(ctx, l.registeredLosses())
			cancel()
			return
		}
		cancel()
		if l.isClosed() || errors.Is(err, errClosed) {
			return
		}
		wait = min(2*wait, time.Second)
		t.Reset(wait)
	}
}

// deleted handles the deletion of a key under the prefix.
func (l *Lock) deleted(ev *clientv3.Event) {
	ekey := string(ev.Kv.Key)
	if key, ok := userKey(ekey[len(l.prefix):]); ok {
		l.notifier.Notify(key)
	}
	if ev.PrevKv == nil {
		return
	}
	l.w.mu.Lock()
	var lost []*handle
	for h := range l.w.losses[ekey] {
		if int64(h.token) == ev.PrevKv.CreateRevision {
			lost = append(lost, h)
			delete(l.w.losses[ekey], h)
		}
	}
	if len(l.w.losses[ekey]) == 0 {
		delete(l.w.losses, ekey)
	}
	l.w.mu.Unlock()
	for _, h := range lost {
		h.markLost()
	}
}

// watchLoss registers h for loss detection by the release watch and makes
// sure the watch runs (in the background: Lost has no context).
func (l *Lock) watchLoss(h *handle) {
	l.w.mu.Lock()
	if l.w.stopped {
		l.w.mu.Unlock()
		return
	}
	if l.w.losses == nil {
		l.w.losses = map[string]map[*handle]struct{}{}
	}
	m := l.w.losses[h.ekey]
	if m == nil {
		m = map[*handle]struct{}{}
		l.w.losses[h.ekey] = m
	}
	m[h] = struct{}{}
	l.w.mu.Unlock()
	// The watch sees the deletions after it is made, and this one may
	// have come before: before the watch was made, or before h was
	// registered. Once the watch runs, one lookup of the key settles it.
	l.bg.Go(func() {
		ctx, cancel := context.WithTimeout(l.ctx, bgTimeout)
		defer cancel()
		if err := l.ensureWatch(ctx); err != nil {
			l.log.Debug("leasehold: etcdlock release watch not established; loss is seen at the next renewal", "err", err)
			return
		}
		l.checkLosses(ctx, []*handle{h})
	})
}

// lossLookupsPerTxn is the most key lookups of one Txn of checkLosses,
// within etcd's default --max-txn-ops (128); halved when a server with a
// smaller one refuses the Txn.
const lossLookupsPerTxn = 64

// checkLosses looks up the keys of hs, grants registered for loss
// detection, and reports lost each whose key is gone or was made again,
// as the release watch would. The watch has no start revision (see
// above), so it does not see a deletion made before it was, or during a
// break: a grant lost then would be seen only at its next renewal. A
// lookup that fails leaves it at that.
func (l *Lock) checkLosses(ctx context.Context, hs []*handle) {
	chunk := lossLookupsPerTxn
	for len(hs) > 0 {
		n := min(len(hs), chunk)
		ops := make([]clientv3.Op, n)
		for i, h := range hs[:n] {
			ops[i] = clientv3.OpGet(h.ekey, clientv3.WithKeysOnly())
		}
		resp, err := l.client.Txn(requireLeader(ctx)).Then(ops...).Commit()
		if errors.Is(err, rpctypes.ErrTooManyOps) && n > 1 {
			chunk = n / 2 // refused whole, before anything was done
			continue
		}
		if err != nil {
			l.log.Debug("leasehold: etcdlock loss lookup failed; loss is seen at the next renewal", "err", err)
			return
		}
		for i, h := range hs[:n] {
			kvs := resp.Responses[i].GetResponseRange().GetKvs()
			if len(kvs) == 0 || kvs[0].CreateRevision != int64(h.token) {
				l.lose(h)
			}
		}
		hs = hs[n:]
	}
}

// lose reports h lost unless it has left loss detection meanwhile
// (released: Release unregisters it before its delete; or reported).
func (l *Lock) lose(h *handle) {
	l.w.mu.Lock()
	_, ok := l.w.losses[h.ekey][h]
	if ok {
		delete(l.w.losses[h.ekey], h)
		if len(l.w.losses[h.ekey]) == 0 {
			delete(l.w.losses, h.ekey)
		}
	}
	l.w.mu.Unlock()
	if ok {
		h.markLost()
	}
}

// registeredLosses returns the grants registered for loss detection.
func (l *Lock) registeredLosses() []*handle {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	var hs []*handle
	for _, m := range l.w.losses {
		for h := range m {
			hs = append(hs, h)
		}
	}
	return hs
}

func (l *Lock) unwatchLoss(h *handle) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	if m := l.w.losses[h.ekey]; m != nil {
		delete(m, h)
		if len(m) == 0 {
			delete(l.w.losses, h.ekey)
		}
	}
}

// stopWatch ends the release watch for good (Close).
func (l *Lock) stopWatch() {
	l.w.mu.Lock()
	l.w.stopped = true
	cancel, done := l.w.cancel, l.w.done
	l.w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
