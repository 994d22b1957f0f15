package memlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// TryAcquireAll implements lock.GroupLock: every key of keys, or none,
// under one lock of the table. Each key gets its own token; the grants
// carry the group's id (Grant.Group in Inspect and List). A refusal names
// the held key that is free last and reports its remaining ttl; keys
// refused because of shares are marked as wanted by a writer, as a
// refused TryAcquire marks them.
func (l *Lock) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (lock.Group, error) {
	if err := backendkit.ValidateGroup(ctx, keys, ttl, lock.DefaultLimits); err != nil {
		return nil, err
	}
	start := time.Now()
	l.mu.Lock()
	var refused error
	for _, k := range keys {
		if err := l.busyLocked(k, start, true); err != nil && lock.RemainingTTL(err) >= lock.RemainingTTL(refused) {
			refused = err
		}
	}
	var gr *group
	if refused == nil {
		gr = &group{l: l, keys: slices.Clone(keys), grants: make([]*grant, len(keys))}
		id := fmt.Sprintf("%s/%d", l.owner, l.token+1)
		for i, k := range keys {
			delete(l.intents, k)
			gr.grants[i] = l.newGrantLocked(k, ttl, start, id)
		}
	}
	l.mu.Unlock()
	l.metrics.Attempt(ctx, start, refused)
	if refused != nil {
		return nil, refused
	}
	return gr, nil
}

// group is the lock.Group of one TryAcquireAll. After Release it stays
// bound to its grants, so every later call returns ErrLost.
type group struct {
	l        *Lock
	keys     []string
	grants   []*grant
	released bool // guarded by l.mu
}

func (g *group) Keys() []string { return slices.Clone(g.keys) }

func (g *group) Tokens() []uint64 {
	t := make([]uint64, len(g.grants))
	for i, gr := range g.grants {
		t[i] = gr.token
	}
	return t
}

func (g *group) ValidUntil() time.Time {
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	return g.grants[0].expires // the grants are extended together
}

// Limits implements lock.Limited for Keep.
func (g *group) Limits() lock.Limits { return lock.DefaultLimits }

// Extend renews every key, or none when one is lost.
func (g *group) Extend(ctx context.Context, ttl time.Duration) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := lock.DefaultLimits.CheckTTL(ttl); err != nil {
		return err
	}
	now := time.Now()
	g.l.mu.Lock()
	defer g.l.mu.Unlock()
	if err := g.lostLocked(now); err != nil {
		return err
	}
	for _, gr := range g.grants {
		gr.expires = now.Add(ttl)
		g.l.wakeHeadLocked(gr.key)
	}
	return nil
}

// Release gives up every key that is still the group's.
func (g *group) Release(ctx context.Context) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	now := time.Now()
	g.l.mu.Lock()
	err := g.lostLocked(now)
	g.released = true
	for _, gr := range g.grants {
		g.l.removeLocked(gr)
	}
	g.l.mu.Unlock()
	g.l.metrics.Release(ctx, err)
	return err
}

// lostLocked returns ErrLost if the group was released or one of its
// grants is gone.
func (g *group) lostLocked(now time.Time) error {
	if g.released {
		return fmt.Errorf("%w: the group of %q was already released", lock.ErrLost, g.keys)
	}
	for _, gr := range g.grants {
		if !g.l.currentLocked(gr, now) {
			return fmt.Errorf("%w: %q token %d expired or was taken over", lock.ErrLost, gr.key, gr.token)
		}
	}
	return nil
}
