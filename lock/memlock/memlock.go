// Package memlock is the in-process backend of leasehold: a map of grants
// behind a mutex, on the monotonic clock.
//
// It keeps every promise of package lock exactly, with no drift allowance:
// ValidUntil is the instant the grant expires. Tokens come from one counter
// per Lock, so they grow across all keys. It implements every optional
// capability, so that it stays the exact reference backend: Waiter
// (per-key channels; a release wakes every subscriber at once), Queue (a
// release hands the key to the longest waiter), MultiLock, Claimer,
// Inspector, Owned, and LossNotifier on its handles (closed when another
// owner takes the key over after expiry, or when ForceRelease removes the
// grant).
//
// It is the embedded default: goroutines of one process share one *Lock.
// It is not a distributed lock: two processes never see each other's
// grants. It works under testing/synctest, where its clock is the bubble's.
//
// Expired grants are dropped when their key is next touched or listed, so a
// process that takes many distinct keys once keeps their entries until then.
//
// Limits: lock.DefaultLimits (any ttl above 0 up to lock.MaxTTL, 366 days;
// up to lock.MaxKeys, 4096, keys per TryAcquireAny or Subscribe; keys of 1
// to lock.MaxKeyLen bytes). Input out of them is an error matching
// lock.ErrInvalidArgument.
package memlock

import (
	"context"
	"fmt"
	"math/rand/v2"
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
}

type grant struct {
	key     string
	owner   string
	token   uint64
	since   time.Time
	expires time.Time
	lost    chan struct{} // made on first Handle.Lost call
}

var (
	_ lock.Lock      = (*Lock)(nil)
	_ lock.Waiter    = (*Lock)(nil)
	_ lock.MultiLock = (*Lock)(nil)
	_ lock.Inspector = (*Lock)(nil)
	_ lock.Owned     = (*Lock)(nil)
	_ lock.Queue     = (*Lock)(nil)
	_ lock.Claimer   = (*Lock)(nil)
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
	return newLock(&table{grants: map[string]*grant{}, queues: map[string][]*queued{}}, opts)
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
	if err := backendkit.Validate(ctx, key, ttl, lock.DefaultLimits); err != nil {
		return nil, err
	}
	start := time.Now()
	l.mu.Lock()
	g, err := l.grantLocked(key, ttl, start)
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
	off := rand.N(len(keys))
	var (
		g        *grant
		err      error
		shortest time.Duration
	)
	l.mu.Lock()
	for i := range keys {
		g, err = l.grantLocked(keys[(off+i)%len(keys)], ttl, start)
		if err == nil {
			break
		}
		if r := lock.RemainingTTL(err); shortest == 0 || r < shortest {
			shortest = r
		}
	}
	l.mu.Unlock()
	if err != nil {
		err = backendkit.NotAcquiredAny(keys, shortest)
	}
	l.metrics.Attempt(ctx, start, err)
	if err != nil {
		return nil, err
	}
	return &handle{l: l, g: g}, nil
}

// grantLocked grants key if it is free or its grant has expired.
func (l *Lock) grantLocked(key string, ttl time.Duration, now time.Time) (*grant, error) {
	if old, ok := l.grants[key]; ok {
		if now.Before(old.expires) {
			return nil, backendkit.NotAcquired(key, old.expires.Sub(now))
		}
		old.markLost()
	}
	l.token++
	g := &grant{key: key, owner: l.owner, token: l.token, since: now, expires: now.Add(ttl)}
	l.grants[key] = g
	return g, nil
}

// currentLocked returns g if it is still the live grant of its key.
func (l *Lock) currentLocked(g *grant, now time.Time) bool {
	return l.grants[g.key] == g && now.Before(g.expires)
}

// removeLocked drops g (if it is still the key's entry) and wakes the key's
// subscribers.
func (l *Lock) removeLocked(g *grant) {
	if l.grants[g.key] != g {
		return
	}
	delete(l.grants, g.key)
	l.handOverLocked(g.key, time.Now())
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

// ForceRelease removes key's current grant whoever holds it, and wakes its
// waiters. The holder finds out at its next Extend or Release (ErrLost) or
// through its handle's Lost channel. It reports whether a grant was removed.
// It is an operator's tool: fencing tokens still protect the resource.
func (l *Lock) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return false, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.grants[key]
	if !ok {
		return false, nil
	}
	live := time.Now().Before(g.expires)
	g.markLost()
	l.removeLocked(g)
	return live, nil
}

// Inspect implements lock.Inspector.
func (l *Lock) Inspect(ctx context.Context, key string) (lock.Grant, bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return lock.Grant{}, false, err
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.grants[key]
	if !ok || !now.Before(g.expires) {
		return lock.Grant{}, false, nil
	}
	return g.info(now), true, nil
}

// List implements lock.Inspector. It also drops the expired grants it meets.
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
			l.removeLocked(g)
			continue
		}
		out = append(out, g.info(now))
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (g *grant) info(now time.Time) lock.Grant {
	return lock.Grant{Key: g.key, Owner: g.owner, Token: g.token, Remaining: g.expires.Sub(now), Since: g.since}
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
	return nil
}

func (h *handle) Release(ctx context.Context) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	now := time.Now()
	h.l.mu.Lock()
	var err error
	if h.released || !h.l.currentLocked(h.g, now) {
		err = h.lostLocked()
	}
	h.released = true
	h.l.removeLocked(h.g) // an expired entry of ours is dropped too
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
		if h.l.grants[h.g.key] != h.g && !h.released {
			close(h.g.lost)
		}
	}
	return h.g.lost
}
