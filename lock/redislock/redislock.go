package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed force_release.lua
	forceReleaseSrc string
	//go:embed wake.lua
	wakeSrc string

	acquireScript      = redis.NewScript(acquireSrc)
	extendScript       = redis.NewScript(extendSrc)
	releaseScript      = redis.NewScript(wakeSrc + releaseSrc)
	inspectScript      = redis.NewScript(inspectSrc)
	forceReleaseScript = redis.NewScript(wakeSrc + forceReleaseSrc)
)

const (
	// DefaultPrefix starts every Redis key and the release channel.
	DefaultPrefix = "leasehold:"
	// MinTTL is the smallest ttl: Redis expires keys with millisecond
	// precision, so ttls are rounded up to whole milliseconds too.
	MinTTL = 10 * time.Millisecond
	// fenceLifetime is how long a fence counter outlives its last grant.
	// Tokens are max(last+1, server µs), so the counter only matters while
	// the server clock could fall behind a token already drawn (a clock
	// step back); an hour covers that and keeps short-lived keys (a
	// timer's per-tick claims) from piling up.
	fenceLifetime = time.Hour
)

// Lock is a lock.Lock on Redis. It is safe for concurrent use; share one
// per process and Close it at the end.
type Lock struct {
	client  redis.UniversalClient
	prefix  string
	channel string
	owner   string
	log     *slog.Logger
	metrics *lock.BackendMetrics

	notifier lock.Notifier
	subMu    sync.Mutex
	pubsub   *redis.PubSub
	closed   bool
	loopDone chan struct{}
}

var (
	_ lock.Lock      = (*Lock)(nil)
	_ lock.Waiter    = (*Lock)(nil)
	_ lock.Queue     = (*Lock)(nil)
	_ lock.MultiLock = (*Lock)(nil)
	_ lock.Inspector = (*Lock)(nil)
)

type settings struct{ prefix string }

// WithPrefix sets the prefix of every Redis key and of the release channel
// (default DefaultPrefix). Instances that should see each other's locks use
// the same prefix. It may not contain braces: hash tags are the keys' own.
func WithPrefix(prefix string) lock.Option {
	return lock.BackendOption("redislock.WithPrefix", func(s *settings) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("prefix %q contains a brace", prefix)
		}
		s.prefix = prefix
		return nil
	})
}

// New returns a Lock over client (a *redis.Client, *redis.ClusterClient,
// failover client or ring: any UniversalClient). It sends nothing until the
// first operation.
func New(client redis.UniversalClient, opts ...lock.Option) (*Lock, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redislock.New: nil client", lock.ErrInvalidArgument)
	}
	s := &settings{prefix: DefaultPrefix}
	cfg, err := lock.NewConfig(s, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{
		client:  client,
		prefix:  s.prefix,
		channel: s.prefix + "released",
		owner:   cfg.Owner,
		log:     cfg.Logger,
		metrics: cfg.Telemetry().Backend("redislock"),
	}, nil
}

// Owner is this instance's owner identity, stored with every grant.
func (l *Lock) Owner() string { return l.owner }

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// TryAcquire implements lock.Lock in one round trip.
func (l *Lock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := lock.Validate(ctx, key, ttl, MinTTL); err != nil {
		return nil, err
	}
	return l.acquire(ctx, []string{key}, ttl, 0, "")
}

// queuePlaceKept is how long a queued waiter keeps its place without
// another attempt; a waiter tries again at least every half of it, so only
// one that stopped (crashed, or gone without saying) loses its place.
const queuePlaceKept = 2 * time.Second

// AcquireQueued implements lock.Queue with a queue of waiters per key kept
// in Redis: a failed attempt puts the waiter in it (at its arrival place),
// and a release wakes only the first two live waiters of the queue, by a
// message for them alone on the release channel, instead of every waiter
// of the key; they try at once, the others sleep on. A waiter tries again
// when the holder's remaining ttl has passed (a holder that crashed does
// not release), and at least every second, which keeps its place; one that
// stops trying loses its place two seconds later. A cancelled waiter
// leaves the queue. lock.Acquire uses it: under contention a release costs
// about two attempts, not one per waiter, and waiters are served about in
// arrival order (a newcomer's first attempt may still win a free key).
func (l *Lock) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (h lock.Handle, err error) {
	if err := lock.Validate(ctx, key, ttl, MinTTL); err != nil {
		return nil, err
	}
	waiter := attemptID()
	sub := l.notifier.Subscribe(key + "\x00" + waiter)
	defer sub.Close()
	if err := l.ensureSubscribed(ctx); err != nil {
		return nil, err
	}
	queued := false
	defer func() {
		if err != nil && queued { // leave the queue; if this fails, the place lapses
			qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = l.client.HDel(qctx, l.deadlinesKey(key), waiter).Err()
		}
	}()
	for {
		h, err := l.acquire(ctx, []string{key}, ttl, 0, waiter)
		if err == nil || !errors.Is(err, lock.ErrNotAcquired) {
			return h, err
		}
		queued = true
		wait := queuePlaceKept / 2
		if hint := lock.RemainingTTL(err); hint > 0 && hint < wait {
			wait = hint + time.Millisecond
		}
		if err := sub.Wait(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// TryAcquireAny implements lock.MultiLock in one round trip, starting at a
// random key. On Redis Cluster all keys must share a hash tag (the
// semaphore's do).
func (l *Lock) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	if err := lock.ValidateKeys(ctx, keys, ttl, MinTTL); err != nil {
		return nil, err
	}
	return l.acquire(ctx, keys, ttl, rand.N(len(keys)), "")
}

// attemptID is a fresh random id: of an acquire attempt (a retried acquire
// finds its own grant by it) and of a queued waiter.
func attemptID() string { return strconv.FormatUint(rand.Uint64(), 36) }

// acquire makes one attempt; waiter, for one key, names the queued waiter
// the attempt is made for (see AcquireQueued).
func (l *Lock) acquire(ctx context.Context, keys []string, ttl time.Duration, offset int, waiter string) (lock.Handle, error) {
	rkeys := make([]string, 0, 2*len(keys)+2)
	for _, k := range keys {
		rkeys = append(rkeys, l.lockKey(k), l.fenceKey(k))
	}
	tail := attemptID() + "|" + l.owner
	if waiter != "" {
		rkeys = append(rkeys, l.queueKey(keys[0]), l.deadlinesKey(keys[0]))
		tail = waiter + "|" + l.owner
	}
	sent := time.Now()
	res, err := acquireScript.Run(ctx, l.client, rkeys, tail, ms(ttl), offset, ms(fenceLifetime),
		waiter, ms(queuePlaceKept)).Int64Slice()
	h, err := l.grant(keys, ttl, sent, tail, res, err)
	l.metrics.Attempt(ctx, sent, err)
	return h, err
}

func (l *Lock) grant(keys []string, ttl time.Duration, sent time.Time, tail string, res []int64, err error) (lock.Handle, error) {
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "CROSSSLOT"):
		return nil, fmt.Errorf("%w: on Redis Cluster the keys of one TryAcquireAny must share a hash tag ({…}): %w", lock.ErrInvalidKey, err)
	case err != nil:
		return nil, lock.Unavailable("redislock: acquire", err)
	case len(res) == 2 && res[0] == 0:
		return nil, lock.NotAcquired(strings.Join(keys, ","), time.Duration(res[1])*time.Millisecond)
	case len(res) == 4 && res[0] == 1 && res[2] >= 0 && int(res[2]) < len(keys):
		k := keys[res[2]]
		tok := uint64(res[1])
		return &handle{
			l: l, key: k, rkey: l.lockKey(k), token: tok,
			value:      strconv.FormatUint(tok, 10) + "|" + strconv.FormatInt(res[3], 10) + "|" + tail,
			validUntil: lock.ValidUntil(sent, ttl),
		}, nil
	}
	return nil, lock.Unavailable("redislock: acquire", fmt.Errorf("unexpected reply %v", res))
}

// handle is one grant.
type handle struct {
	l     *Lock
	key   string
	rkey  string
	token uint64
	value string

	mu         sync.Mutex
	validUntil time.Time
	released   bool
}

func (h *handle) Key() string   { return h.key }
func (h *handle) Token() uint64 { return h.token }

func (h *handle) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

func (h *handle) lost(what string) error {
	return fmt.Errorf("%w: %s of %q (token %d): the grant is gone", lock.ErrLost, what, h.key, h.token)
}

// Extend implements lock.Handle in one round trip.
func (h *handle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := lock.CheckContext(ctx); err != nil {
		return err
	}
	if err := lock.CheckTTL(ttl, MinTTL); err != nil {
		return err
	}
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if released {
		return h.lost("extend after release")
	}
	sent := time.Now()
	n, err := extendScript.Run(ctx, h.l.client, []string{h.rkey}, h.value, ms(ttl)).Int64()
	switch {
	case err != nil:
		return lock.Unavailable("redislock: extend", err)
	case n == 0:
		return h.lost("extend")
	}
	h.mu.Lock()
	h.validUntil = lock.ValidUntil(sent, ttl)
	h.mu.Unlock()
	return nil
}

// Release implements lock.Handle in one round trip, which also wakes the
// waiters of the key.
func (h *handle) Release(ctx context.Context) error {
	if err := lock.CheckContext(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	released := h.released
	h.released = true
	h.mu.Unlock()
	if released {
		return h.lost("second release")
	}
	n, err := releaseScript.Run(ctx, h.l.client, []string{h.rkey, h.l.fenceKey(h.key), h.l.queueKey(h.key), h.l.deadlinesKey(h.key)},
		h.value, h.l.channel, h.key, strconv.FormatUint(h.token, 10)).Int64()
	switch {
	case err != nil:
		// Unknown outcome: the grant may still be there; it expires with its ttl.
		err = lock.Unavailable("redislock: release", err)
	case n == 2 && time.Now().Before(h.ValidUntil()):
		// Gone before its time, yet no grant was made since: this release
		// was sent twice (go-redis retries a command whose reply it did not
		// get) and the first took effect.
	case n != 1:
		err = h.lost("release")
	}
	h.l.metrics.Release(ctx, err)
	return err
}

// ForceRelease deletes key's grant whoever holds it and wakes its waiters;
// it reports whether there was one. The holder learns of it at its next
// Extend or Release. An operator's tool: fencing still protects the
// resource from the evicted holder.
func (l *Lock) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := lock.ValidateKey(ctx, key); err != nil {
		return false, err
	}
	n, err := forceReleaseScript.Run(ctx, l.client, []string{l.lockKey(key), l.fenceKey(key), l.queueKey(key), l.deadlinesKey(key)},
		l.channel, key).Int64()
	if err != nil {
		return false, lock.Unavailable("redislock: force release", err)
	}
	return n == 1, nil
}

// Close ends the shared release subscription. The client stays open: it is
// the caller's. Subscriptions still open are woken once, so that their
// waiters try again; they hear of no release after that (a later Wait
// returns at its hint or when its context ends). Subscribe, and so lock.Acquire
// and AcquireQueued, fail after Close with an error that matches
// lock.ErrInvalidArgument; the other operations work while the client does.
func (l *Lock) Close() error {
	l.subMu.Lock()
	ps, done := l.pubsub, l.loopDone
	l.closed = true
	l.pubsub = nil
	l.subMu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	l.notifier.NotifyAll()
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}
