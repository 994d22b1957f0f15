package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Subscribe implements lock.Waiter. All subscriptions of one Lock share one
// Redis subscription to the release channel, made on first use; Subscribe
// returns once it is confirmed by the server, so a release published after
// that is delivered. When the subscription's connection breaks, every
// waiter is woken to try again, since releases may have been missed.
func (l *Lock) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	if err := backendkit.ValidateSubscribe(ctx, keys, limits); err != nil {
		return nil, err
	}
	sub := l.notifier.Subscribe(keys...)
	if err := l.ensureSubscribed(ctx); err != nil {
		_ = sub.Close()
		return nil, err
	}
	return sub, nil
}

var errClosed = errors.New("redislock: Lock is closed")

// ensureSubscribed opens the Lock's subscription if it is not open: one
// caller subscribes, within its ctx, while the others wait for it within
// theirs (and try themselves if it failed). The subscribing caller held
// the mutex through the round trip, and every other caller (Close too)
// waited for it past its own context.
func (l *Lock) ensureSubscribed(ctx context.Context) error {
	for {
		l.subMu.Lock()
		if l.closed {
			l.subMu.Unlock()
			return fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errClosed)
		}
		if l.pubsub != nil {
			l.subMu.Unlock()
			return nil
		}
		if other := l.subscribing; other != nil {
			l.subMu.Unlock()
			select {
			case <-other:
				continue
			case <-ctx.Done():
				return backendkit.Unavailable("redislock: subscribe", ctx.Err())
			}
		}
		mine := make(chan struct{})
		l.subscribing = mine
		l.subMu.Unlock()
		ps, err := l.subscribe(ctx)
		l.subMu.Lock()
		l.subscribing = nil
		close(mine)
		switch {
		case err != nil:
			l.subMu.Unlock()
			return backendkit.Unavailable("redislock: subscribe", err)
		case l.closed: // closed meanwhile
			l.subMu.Unlock()
			_ = ps.Close()
			return fmt.Errorf("%w: %w", lock.ErrInvalidArgument, errClosed)
		}
		l.pubsub = ps
		l.loopDone = make(chan struct{})
		go l.listen(ps, l.loopDone)
		l.subMu.Unlock()
		return nil
	}
}

// subscribe opens the release subscription and waits for the server's
// confirmation, within ctx (see within): a subscription confirmed after ctx
// ended is closed.
func (l *Lock) subscribe(ctx context.Context) (*redis.PubSub, error) {
	type result struct {
		ps  *redis.PubSub
		err error
	}
	done := make(chan result, 1)
	go func() {
		ps := l.client.Subscribe(ctx, l.channel, l.inbox)
		// Both confirmations, so that the second does not reach listen,
		// which takes one for a resubscription and wakes every waiter.
		for confirmed := 0; confirmed < 2; {
			msg, err := ps.Receive(ctx)
			if err != nil {
				_ = ps.Close()
				done <- result{nil, err}
				return
			}
			if _, ok := msg.(*redis.Subscription); ok {
				confirmed++
			}
		}
		done <- result{ps, nil}
	}()
	select {
	case r := <-done:
		return r.ps, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.ps != nil {
				_ = r.ps.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func (l *Lock) listen(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	retry := time.NewTimer(0)
	<-retry.C
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			l.subMu.Lock()
			closed := l.closed
			l.subMu.Unlock()
			if closed || errors.Is(err, redis.ErrClosed) {
				return
			}
			// Releases may be lost while the connection is down: wake
			// everyone to try again, then let go-redis reconnect.
			l.log.Debug("leasehold: redislock release subscription interrupted", "err", err)
			l.notifier.NotifyAll()
			retry.Reset(50 * time.Millisecond)
			<-retry.C
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			// On this Lock's own inbox, "\x02<key>\x00<waiter>\x00..."
			// hands the key to one of its queued waiters (if it is still
			// subscribed); on the release channel every message is a
			// released key, whatever its first byte (a key may start
			// with "\x02" too).
			if m.Channel == l.inbox {
				rest, ok := strings.CutPrefix(m.Payload, "\x02")
				if to, waiter, g, ok2 := parseHanded(rest); ok && ok2 {
					l.handedMu.Lock()
					if l.notifier.Watching(to) {
						if l.handed == nil {
							l.handed = make(map[string]handedGrant)
						}
						l.handed[waiter] = g
					}
					l.handedMu.Unlock()
					l.notifier.Notify(to)
				}
				continue
			}
			l.notifier.Notify(m.Payload)
		case *redis.Subscription:
			l.notifier.NotifyAll() // resubscribed after a reconnect
		}
	}
}
