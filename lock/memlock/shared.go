package memlock

import (
	"context"
	"slices"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// TryAcquireShared implements lock.SharedLock: a share of key, with its own
// expiry and a token from the same counter as every other grant. It is
// refused while an exclusive grant holds key, while a writer waits in
// key's queue (AcquireQueued), and for lock.IntentTTL after an exclusive
// attempt was refused because of shares; the error's Remaining is the
// longest of what is known: the exclusive grant's remaining ttl, the
// writer's mark's, and, with a writer queued, the last share's.
func (l *Lock) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return l.try(ctx, key, ttl, l.shareLocked)
}

func (l *Lock) shareLocked(key string, ttl time.Duration, now time.Time) (*grant, error) {
	var wait time.Duration
	if g, ok := l.grants[key]; ok {
		if now.Before(g.expires) {
			wait = g.expires.Sub(now)
		} else {
			g.markLost()
			l.dropLocked(g)
		}
	}
	intent, marked := l.intents[key]
	if marked && now.Before(intent) {
		wait = max(wait, intent.Sub(now))
	} else if marked {
		delete(l.intents, key)
		marked = false
	}
	last := l.liveSharesLocked(key, now)
	queued := len(l.queues[key]) > 0
	if queued && !last.IsZero() {
		wait = max(wait, last.Sub(now))
	}
	if wait > 0 || marked || queued {
		return nil, backendkit.NotAcquired(key, wait)
	}
	l.token++
	g := &grant{key: key, owner: l.owner, token: l.token, since: now, expires: now.Add(ttl), shared: true}
	l.shares[key] = append(l.shares[key], g)
	l.recordLocked(g, now)
	return g, nil
}

// liveSharesLocked drops key's expired shares and returns the expiry of
// the last live one (zero when none is left).
func (l *Lock) liveSharesLocked(key string, now time.Time) time.Time {
	var last time.Time
	s := l.shares[key]
	for i, g := range s {
		if !now.Before(g.expires) { // rare: rebuild without the expired
			var kept []*grant
			for _, g := range s[i:] {
				if now.Before(g.expires) {
					kept = append(kept, g)
					last = later(last, g.expires)
				} else {
					g.markLost()
				}
			}
			l.setSharesLocked(key, append(slices.Clone(s[:i]), kept...))
			return last
		}
		last = later(last, g.expires)
	}
	return last
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// setSharesLocked records key's shares, deleting the entry when none.
func (l *Lock) setSharesLocked(key string, s []*grant) {
	if len(s) == 0 {
		delete(l.shares, key)
	} else {
		l.shares[key] = s
	}
}

// dropShareLocked removes share g and reports whether it was recorded.
func (l *Lock) dropShareLocked(g *grant) bool {
	s := l.shares[g.key]
	i := slices.Index(s, g)
	if i < 0 {
		return false
	}
	l.setSharesLocked(g.key, slices.Delete(slices.Clone(s), i, i+1))
	return true
}
