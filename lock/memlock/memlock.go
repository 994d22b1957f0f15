// Package memlock is the in-process backend of leasehold: a map of grants
// behind a mutex, on the monotonic clock.
//
// It keeps every promise of package lock exactly, with no drift allowance:
// ValidUntil is the instant the grant expires. Tokens come from one counter
// per Lock, so they grow across all keys. It implements every optional
// capability, so that it stays the exact reference backend: Waiter
// (per-key channels; a release wakes every subscriber at once), Queue (a
// release hands the key to the longest waiter), MultiLock, Claimer,
// EachReleaser (one pass under the mutex), Inspector, Owned, and
// LossNotifier on its handles (closed when another owner takes the key
// over after expiry, or when ForceRelease removes the grant).
//
// It grants keys in both of lock's other shapes. SharedLock: shares with
// their own expiries and tokens from the same counter; a writer waiting in
// the queue, or refused because of shares within lock.IntentTTL, holds new
// shares off, and the last share's release hands the key to the queue's
// head. GroupLock: TryAcquireAll takes every key of a set or none, under
// one lock of the table, each key with its own token.
//
// It is the embedded default: goroutines of one process share one *Lock.
// It is not a distributed lock: two processes never see each other's
// grants. It works under testing/synctest, where its clock is the bubble's.
//
// Expired grants, shares and writers' marks are dropped when their key is
// touched or listed, or by a sweep that runs each time the table has
// recorded as many entries as it held at the last one: the table holds at
// most about twice the entries alive at once, never the history, however
// many distinct keys a process takes once (a timer's tick claims, say).
//
// Limits: lock.DefaultLimits (any ttl above 0 up to lock.MaxTTL, 366 days;
// up to lock.MaxKeys, 4096, keys per TryAcquireAny, TryAcquireAll or
// Subscribe; keys of 1 to lock.MaxKeyLen bytes). Input out of them is an
// error matching lock.ErrInvalidArgument.
package memlock

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Lock is the in-process lock. The zero value is not usable; call New.
type Lock struct {
	owner   string
	metrics *backendkit.BackendMetrics
	*table
}

// table is the state that instances made by Share have in common.
type table struct {
	mu       sync.Mutex
	grants   map[string]*grant
	token    uint64
	notifier backendkit.Notifier
	queues   map[string][]*queued // AcquireQueued's waiters, head first
	shares   map[string][]*grant  // TryAcquireShared's grants, oldest first
	intents  map[string]time.Time // until when a refused writer holds new shares off
	recent   []*grant             // every entry above, and some gone: the sweep's (expiry.go)
	swept    int                  // len(recent) after the last sweep
}

type grant struct {
	key     string
	owner   string
	token   uint64
	since   time.Time
	expires time.Time
	shared  bool          // a share (TryAcquireShared), in table.shares
	dropped bool          // an exclusive grant no longer in table.grants (dropLocked)
	mark    bool          // a writer's mark in table.intents (only in table.recent)
	group   string        // the TryAcquireAll that made it, if one did
	lost    chan struct{} // made on first Handle.Lost call
}

var (
	_ lock.Lock       = (*Lock)(nil)
	_ lock.Waiter     = (*Lock)(nil)
	_ lock.MultiLock  = (*Lock)(nil)
	_ lock.Inspector  = (*Lock)(nil)
	_ lock.Owned      = (*Lock)(nil)
	_ lock.Queue      = (*Lock)(nil)
	_ lock.Claimer    = (*Lock)(nil)
	_ lock.SharedLock = (*Lock)(nil)
	_ lock.GroupLock  = (*Lock)(nil)
)

// Option configures New and Share.
type Option func(*config) error

type config struct{ common lock.Common }

// WithCommon sets the owner identity stored with every grant (default a
// fresh lock.NewOwner) and where logs, metrics and spans go.
func WithCommon(c lock.Common) Option {
	return func(cfg *config) error { cfg.common = cfg.common.Merge(c); return nil }
}

// New returns an empty Lock. It fails only on an invalid option (an owner
// that backendkit.CheckOwner refuses), with an error that matches
// lock.ErrInvalidArgument.
func New(opts ...Option) (*Lock, error) {
	return newLock(&table{
		grants:  map[string]*grant{},
		queues:  map[string][]*queued{},
		shares:  map[string][]*grant{},
		intents: map[string]time.Time{},
	}, opts)
}

// Share returns another instance over the same grants, with its own owner
// identity (a new one unless WithCommon sets it) and options: the
// in-process stand-in for a second host on the same server. Tests and
// simulations use it; a real program shares one *Lock.
func (l *Lock) Share(opts ...Option) (*Lock, error) { return newLock(l.table, opts) }

func newLock(t *table, opts []Option) (*Lock, error) {
	var cfg config
	if err := backendkit.Apply("memlock", &cfg, opts); err != nil {
		return nil, err
	}
	c, err := backendkit.Resolve("memlock", cfg.common, "")
	if err != nil {
		return nil, err
	}
	return &Lock{owner: c.Owner, metrics: backendkit.NewTelemetry(c).Backend("memlock"), table: t}, nil
}

// Owner is this instance's owner identity.
func (l *Lock) Owner() string { return l.owner }

// Limits implements lock.Limited: lock.DefaultLimits (any positive ttl up
// to lock.MaxTTL, lock.MaxKeys keys per call).
func (l *Lock) Limits() lock.Limits { return lock.DefaultLimits }

// Limits implements lock.Limited for Keep.
func (h *handle) Limits() lock.Limits { return lock.DefaultLimits }

// TryAcquire implements lock.Lock.
func (l *Lock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return l.try(ctx, key, ttl, l.grantLocked)
}

// try is one attempt of TryAcquire or TryAcquireShared: grant under the
// table's lock.
func (l *Lock) try(ctx context.Context, key string, ttl time.Duration, grant func(string, time.Duration, time.Time) (*grant, error)) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, lock.DefaultLimits); err != nil {
		return nil, err
	}
	start := time.Now()
	l.mu.Lock()
	g, err := grant(key, ttl, start)
	l.mu.Unlock()
	l.metrics.Attempt(ctx, start, err)
	if err != nil {
		return nil, err
	}
	return &handle{l: l, g: g}, nil
}

// TryAcquireAny implements lock.MultiLock: it takes the first free key,
// starting at a random offset.
func (l *Lock) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.ValidateKeys(ctx, keys, ttl, lock.DefaultLimits); err != nil {
		return nil, err
	}
	start := time.Now()
	l.mu.Lock()
	g, err := l.anyLocked(keys, ttl, start)
	l.mu.Unlock()
	l.metrics.Attempt(ctx, start, err)
	if err != nil {
		return nil, err
	}
	return &handle{l: l, g: g}, nil
}

// grantLocked grants key exclusively if it is free or its grant has
// expired. Refused because of shares, it marks the key as wanted by a
// writer for lock.IntentTTL; granted, it clears that mark.
func (l *Lock) grantLocked(key string, ttl time.Duration, now time.Time) (*grant, error) {
	if err := l.busyLocked(key, now, true); err != nil {
		return nil, err
	}
	delete(l.intents, key)
	return l.newGrantLocked(key, ttl, now, ""), nil
}

// busyLocked returns ErrNotAcquired if key has a live exclusive grant or
// live shares, and drops the expired ones it meets. Refused because of
// shares, it sets the writer's mark when mark is true.
func (l *Lock) busyLocked(key string, now time.Time, mark bool) error {
	if old, ok := l.grants[key]; ok {
		if now.Before(old.expires) {
			return backendkit.NotAcquired(key, old.expires.Sub(now))
		}
		old.markLost()
		l.dropLocked(old)
	}
	if last := l.liveSharesLocked(key, now); !last.IsZero() {
		if mark {
			l.intents[key] = now.Add(lock.IntentTTL)
			l.recordLocked(&grant{key: key, expires: l.intents[key], mark: true}, now)
		}
		return backendkit.NotAcquired(key, last.Sub(now))
	}
	return nil
}

// newGrantLocked records a grant of key with the next token.
func (l *Lock) newGrantLocked(key string, ttl time.Duration, now time.Time, group string) *grant {
	l.token++
	g := &grant{key: key, owner: l.owner, token: l.token, since: now, expires: now.Add(ttl), group: group}
	l.grants[key] = g
	l.recordLocked(g, now)
	return g
}

// currentLocked returns g if it is still the live grant of its key.
func (l *Lock) currentLocked(g *grant, now time.Time) bool {
	return l.presentLocked(g) && now.Before(g.expires)
}

// presentLocked reports whether g is still recorded (live or expired).
func (l *Lock) presentLocked(g *grant) bool {
	if g.shared {
		return slices.Contains(l.shares[g.key], g)
	}
	return !g.dropped
}

// dropLocked removes g, an exclusive grant still recorded, from the
// table: the one way out of it, so that g.dropped tells whether g is
// recorded without a look at the map.
func (l *Lock) dropLocked(g *grant) {
	delete(l.grants, g.key)
	g.dropped = true
}

// removeLocked drops g (if it is still recorded) and, if that frees the
// key, hands it to the head of its queue and wakes its subscribers.
func (l *Lock) removeLocked(g *grant) {
	if !g.shared {
		if g.dropped {
			return
		}
		l.dropLocked(g)
	} else if !l.dropShareLocked(g) {
		return
	} else if !l.liveSharesLocked(g.key, time.Now()).IsZero() {
		// A queued writer waits for the last share: for the expiry of
		// another one now.
		l.wakeHeadLocked(g.key)
		return
	}
	if len(l.queues[g.key]) > 0 {
		l.handOverLocked(g.key, time.Now())
	}
	l.notifier.Notify(g.key)
}

func (g *grant) markLost() {
	if g.lost != nil {
		select {
		case <-g.lost:
		default:
			close(g.lost)
		}
	}
}

// ForceRelease removes key's current grant whoever holds it (the
// exclusive grant, or every share), and wakes its waiters. The holders
// find out at their next Extend or Release (ErrLost) or through their
// handles' Lost channels. It reports whether a live grant was removed.
// It is an operator's tool: fencing tokens still protect the resource.
func (l *Lock) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return false, err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	live := false
	for _, g := range append(slices.Clone(l.shares[key]), l.grants[key]) {
		if g == nil {
			continue
		}
		live = live || now.Before(g.expires)
		g.markLost()
		l.removeLocked(g)
	}
	return live, nil
}

// Inspect implements lock.Inspector: the exclusive grant of key, or of
// its shares the one that expires first (Grant.Shared).
func (l *Lock) Inspect(ctx context.Context, key string) (lock.Grant, bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return lock.Grant{}, false, err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if g, ok := l.grants[key]; ok && now.Before(g.expires) {
		return g.info(now), true, nil
	}
	var first *grant
	for _, g := range l.shares[key] {
		if now.Before(g.expires) && (first == nil || g.expires.Before(first.expires)) {
			first = g
		}
	}
	if first == nil {
		return lock.Grant{}, false, nil
	}
	return first.info(now), true, nil
}

// List implements lock.Inspector: one entry per grant, so a key with
// shares appears once per share. It also drops the expired grants it
// meets.
func (l *Lock) List(ctx context.Context, prefix string) ([]lock.Grant, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	var out []lock.Grant
	l.mu.Lock()
	for k, g := range l.grants {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if !now.Before(g.expires) {
			g.markLost()
			l.removeLocked(g)
			continue
		}
		out = append(out, g.info(now))
	}
	for k, until := range l.intents {
		if strings.HasPrefix(k, prefix) && !now.Before(until) {
			delete(l.intents, k)
		}
	}
	for k := range l.shares {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		l.liveSharesLocked(k, now)
		for _, g := range l.shares[k] {
			out = append(out, g.info(now))
		}
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].Token < out[j].Token
	})
	return out, nil
}

func (g *grant) info(now time.Time) lock.Grant {
	return lock.Grant{Key: g.key, Owner: g.owner, Token: g.token, Remaining: g.expires.Sub(now), Since: g.since,
		Shared: g.shared, Group: g.group}
}

// handle is one grant. After Release it stays bound to its grant, which is
// no longer current, so every later call returns ErrLost.
type handle struct {
	l        *Lock
	g        *grant
	released bool // guarded by l.mu
}

var _ lock.LossNotifier = (*handle)(nil)

func (h *handle) Key() string   { return h.g.key }
func (h *handle) Token() uint64 { return h.g.token }

func (h *handle) ValidUntil() time.Time {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	return h.g.expires
}

func (h *handle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := lock.DefaultLimits.CheckTTL(ttl); err != nil {
		return err
	}
	now := time.Now()
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.released || !h.l.currentLocked(h.g, now) {
		return h.lostLocked()
	}
	h.g.expires = now.Add(ttl)
	h.l.wakeHeadLocked(h.g.key) // a queued waiter waits for this expiry
	return nil
}

func (h *handle) Release(ctx context.Context) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	now := time.Now()
	h.l.mu.Lock()
	err := h.releaseLocked(now)
	h.l.mu.Unlock()
	h.l.metrics.Release(ctx, err)
	return err
}

func (h *handle) lostLocked() error {
	if h.released {
		return fmt.Errorf("%w: %q token %d was already released", lock.ErrLost, h.g.key, h.g.token)
	}
	return fmt.Errorf("%w: %q token %d expired or was taken over", lock.ErrLost, h.g.key, h.g.token)
}

// Lost implements lock.LossNotifier.
func (h *handle) Lost() <-chan struct{} {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.g.lost == nil {
		h.g.lost = make(chan struct{})
		if !h.l.presentLocked(h.g) && !h.released {
			close(h.g.lost)
		}
	}
	return h.g.lost
}
