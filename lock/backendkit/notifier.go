package backendkit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// Notifier fans release notifications out to subscriptions. Backends use it
// to implement lock.Waiter: they feed it from their own channel (pub/sub,
// LISTEN/NOTIFY, a watch, a map of grants) and return its subscriptions.
// The zero Notifier is ready to use.
//
// A subscription to one key costs two allocations (itself and its
// channel): the subscriptions of a key are a list threaded through them.
// Its first Wait with a hint makes a timer, which its later Waits reuse.
type Notifier struct {
	mu   sync.Mutex
	subs map[string]*entry // each key's list of subscriptions
}

// entry is one subscription's place in the list of one of its keys.
type entry struct {
	s          *subscription
	key        string
	prev, next *entry
}

// Subscribe registers interest in keys. Every Notify of one of them after
// Subscribe returns is delivered to the subscription's next Wait.
func (n *Notifier) Subscribe(keys ...string) lock.Subscription {
	s := &subscription{n: n, ch: make(chan struct{}, 1)}
	s.entries = s.one[:0]
	if len(keys) > len(s.one) {
		s.entries = make([]entry, 0, len(keys))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs == nil {
		n.subs = map[string]*entry{}
	}
	for _, k := range keys {
		s.entries = append(s.entries, entry{s: s, key: k})
		e := &s.entries[len(s.entries)-1]
		if head := n.subs[k]; head != nil {
			e.next, head.prev = head, e
		}
		n.subs[k] = e
	}
	return s
}

// Notify wakes every subscription to key.
func (n *Notifier) Notify(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for e := n.subs[key]; e != nil; e = e.next {
		e.s.notify()
	}
}

// NotifyAll wakes every subscription. A backend calls it when its
// notification channel was interrupted (a reconnect) and releases may have
// been missed: waiters then try again instead of sleeping through them.
func (n *Notifier) NotifyAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, head := range n.subs {
		for e := head; e != nil; e = e.next {
			e.s.notify()
		}
	}
}

// Watching reports whether any subscription is interested in key.
func (n *Notifier) Watching(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.subs[key] != nil
}

type subscription struct {
	n       *Notifier
	ch      chan struct{} // one pending notification
	entries []entry       // one per key; closed when nil (under n.mu)
	one     [2]entry      // entries' array for up to two keys (a queued waiter's: its handoff and the key's release)
	// timer is Wait's, kept for the next Wait (taken while one runs). Not
	// shared between subscriptions: a timer made in a synctest bubble
	// may not be used outside it.
	timer atomic.Pointer[time.Timer]
}

func (s *subscription) notify() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *subscription) Wait(ctx context.Context, hint time.Duration) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	var timeout <-chan time.Time
	if hint > 0 {
		t := s.timer.Swap(nil)
		if t == nil {
			t = time.NewTimer(hint)
		} else {
			t.Reset(hint)
		}
		defer s.putTimer(t)
		timeout = t.C
	}
	select {
	case <-s.ch:
	case <-timeout:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// putTimer stops t and keeps it for the next Wait. Since Go 1.23 a stopped
// timer delivers no stale value; the drain covers a program built with
// asynctimerchan=1 (a main module that asks for Go 1.22 or older).
func (s *subscription) putTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	s.timer.Store(t)
}

func (s *subscription) Close() error {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	for i := range s.entries {
		e := &s.entries[i]
		switch {
		case e.prev != nil:
			e.prev.next = e.next
		case e.next != nil:
			s.n.subs[e.key] = e.next
		default:
			delete(s.n.subs, e.key)
		}
		if e.next != nil {
			e.next.prev = e.prev
		}
		e.prev, e.next = nil, nil
	}
	s.entries = nil
	return nil
}
