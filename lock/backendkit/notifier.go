package backendkit

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// Notifier fans release notifications out to subscriptions. Backends use it
// to implement lock.Waiter: they feed it from their own channel (pub/sub,
// LISTEN/NOTIFY, a watch, a map of grants) and return its subscriptions.
// The zero Notifier is ready to use.
type Notifier struct {
	mu   sync.Mutex
	subs map[string]map[*subscription]struct{}
}

// Subscribe registers interest in keys. Every Notify of one of them after
// Subscribe returns is delivered to the subscription's next Wait.
func (n *Notifier) Subscribe(keys ...string) lock.Subscription {
	s := &subscription{n: n, keys: keys, ch: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.subs == nil {
		n.subs = map[string]map[*subscription]struct{}{}
	}
	for _, k := range keys {
		m := n.subs[k]
		if m == nil {
			m = map[*subscription]struct{}{}
			n.subs[k] = m
		}
		m[s] = struct{}{}
	}
	return s
}

// Notify wakes every subscription to key.
func (n *Notifier) Notify(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.subs[key] {
		s.notify()
	}
}

// NotifyAll wakes every subscription. A backend calls it when its
// notification channel was interrupted (a reconnect) and releases may have
// been missed: waiters then try again instead of sleeping through them.
func (n *Notifier) NotifyAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.subs {
		for s := range m {
			s.notify()
		}
	}
}

// Watching reports whether any subscription is interested in key.
func (n *Notifier) Watching(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.subs[key]) > 0
}

type subscription struct {
	n    *Notifier
	keys []string
	ch   chan struct{} // one pending notification
	once sync.Once
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
		t := time.NewTimer(hint)
		defer t.Stop()
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

func (s *subscription) Close() error {
	s.once.Do(func() {
		s.n.mu.Lock()
		defer s.n.mu.Unlock()
		for _, k := range s.keys {
			if m := s.n.subs[k]; m != nil {
				delete(m, s)
				if len(m) == 0 {
					delete(s.n.subs, k)
				}
			}
		}
	})
	return nil
}
