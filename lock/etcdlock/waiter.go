package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
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
	// The watch outlives ctx, but its creation must not: the client blocks
	// in Watch until it has a stream.
	stop := context.AfterFunc(ctx, cancel)
	wch := l.client.Watch(wctx, l.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(),
		clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
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
	}
	if !stop() {
		// ctx ended: the watch closing is its doing, not the server's.
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
		cancel()
		if err == nil {
			l.notifier.NotifyAll() // anything released meanwhile
			return
		}
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
	running := l.w.running
	l.w.mu.Unlock()
	if !running {
		l.bg.Go(func() {
			ctx, cancel := context.WithTimeout(l.ctx, bgTimeout)
			defer cancel()
			if err := l.ensureWatch(ctx); err != nil {
				l.log.Debug("leasehold: etcdlock release watch not established; loss is seen at the next renewal", "err", err)
			}
		})
	}
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
