package memlock

import (
	"context"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// Subscribe implements lock.Waiter.
func (l *Lock) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	if err := lock.ValidateKeys(ctx, keys, 1, 0); err != nil {
		return nil, err
	}
	s := &subscription{l: l, keys: keys, ch: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		m := l.subs[k]
		if m == nil {
			m = map[*subscription]struct{}{}
			l.subs[k] = m
		}
		m[s] = struct{}{}
	}
	return s, nil
}

type subscription struct {
	l    *Lock
	keys []string
	ch   chan struct{} // holds one pending notification
}

// notify records a release; called with l.mu held.
func (s *subscription) notify() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (s *subscription) Wait(ctx context.Context, hint time.Duration) error {
	if err := lock.CheckContext(ctx); err != nil {
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
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	for _, k := range s.keys {
		if m := s.l.subs[k]; m != nil {
			delete(m, s)
			if len(m) == 0 {
				delete(s.l.subs, k)
			}
		}
	}
	return nil
}
