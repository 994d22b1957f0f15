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
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed release_key.lua
	releaseKeySrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed force_release.lua
	forceReleaseSrc string
	//go:embed handoff.lua
	handoffSrc string
	//go:embed leave.lua
	leaveSrc string
	//go:embed waiting.lua
	waitingSrc string
	//go:embed clock.lua
	clockSrc string
	//go:embed shares.lua
	sharesSrc string
	//go:embed acquire_shared.lua
	acquireSharedSrc string
	//go:embed extend_shared.lua
	extendSharedSrc string
	//go:embed release_shared.lua
	releaseSharedSrc string
	//go:embed acquire_all.lua
	acquireAllSrc string
	//go:embed extend_all.lua
	extendAllSrc string
	//go:embed release_all.lua
	releaseAllSrc string

	// intentSrc gives the scripts that make exclusive attempts lock.IntentTTL
	// (see shares.lua).
	intentSrc = fmt.Sprintf("local intentMs = %d\n", ms(lock.IntentTTL))

	acquireScript       = rediscall.NewScript(clockSrc + intentSrc + anyOfSrc + acquireSrc)
	extendScript        = rediscall.NewScript(extendSrc)
	releaseScript       = rediscall.NewScript(clockSrc + handoffSrc + releaseKeySrc + releaseSrc)
	inspectScript       = rediscall.NewScript(clockSrc + inspectSrc)
	acquireSharedScript = rediscall.NewScript(clockSrc + sharesSrc + acquireSharedSrc)
	extendSharedScript  = rediscall.NewScript(clockSrc + sharesSrc + extendSharedSrc)
	releaseSharedScript = rediscall.NewScript(clockSrc + handoffSrc + sharesSrc + releaseSharedSrc)
	acquireAllScript    = rediscall.NewScript(clockSrc + intentSrc + acquireAllSrc)
	extendAllScript     = rediscall.NewScript(extendAllSrc)
	releaseAllScript    = rediscall.NewScript(clockSrc + handoffSrc + releaseKeySrc + releaseAllSrc)
	forceReleaseScript  = rediscall.NewScript(clockSrc + handoffSrc + forceReleaseSrc)
	leaveScript         = rediscall.NewScript(clockSrc + handoffSrc + leaveSrc)
	waitingScript       = rediscall.NewScript(waitingSrc)

	// The scripts' constant arguments, boxed once.
	fenceLifetimeArg  any = ms(fenceLifetime)
	queuePlaceKeptArg any = ms(queuePlaceKept)
)

const (
	// DefaultPrefix starts every Redis key and the release channel.
	DefaultPrefix = "leasehold:"
	// MinTTL is the smallest ttl: Redis expires keys with millisecond
	// precision, so ttls are rounded up to whole milliseconds too.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the largest ttl (lock.MaxTTL).
	MaxTTL = lock.MaxTTL
	// MaxKeys is the most keys of one TryAcquireAny or Subscribe call
	// (lock.MaxKeys): a script unpacks them within Lua's stack limit.
	MaxKeys = lock.MaxKeys
	// MaxGroupKeys is the most keys of one TryAcquireAll: one script holds
	// the whole group. A group of 256 costs the server about 1 ms to take
	// (1,024 cost about 6 ms, which stalled the server's other clients for
	// too long).
	MaxGroupKeys = 256
	// fenceLifetime is how long a fence counter outlives its last grant.
	// Tokens are max(last+1, server µs), so the counter only matters while
	// the server clock could fall behind a token already drawn (a clock
	// step back); an hour covers that. A counter that a claim creates
	// (ClaimEach: a timer's one-off tick keys) lives only as long as the
	// claim: an hour of 10,000 timers' ticks would be 36 million counters.
	fenceLifetime = time.Hour
)

// Lock is a lock.Lock on Redis. It is safe for concurrent use; share one
// per process and Close it at the end.
type Lock struct {
	client  redis.UniversalClient
	bounds  rediscall.Bounds // calls end with their context
	prefix  string
	channel string
	inbox   string // this Lock's own channel: handoffs to its waiters
	// channel and inbox boxed once, as script arguments
	channelArg, inboxArg any
	owner                string
	log                  *slog.Logger
	metrics              *backendkit.BackendMetrics
	acks                 rediscall.Acks // WithReplicaAcks

	notifier backendkit.Notifier
	// handed: the grants handed to this Lock's queued waiters (waiter id →
	// handedGrant), until AcquireQueued takes them; handedMu also orders a
	// waiter's leaving after the listener's check that it still listens.
	handedMu    sync.Mutex
	handed      map[string]handedGrant
	subMu       sync.Mutex
	pubsub      *redis.PubSub
	subscribing chan struct{} // closed when the subscription under way (ensureSubscribed) ends; nil when none is
	closed      bool
	loopDone    chan struct{}
}

var (
	_ lock.Lock      = (*Lock)(nil)
	_ lock.Waiter    = (*Lock)(nil)
	_ lock.Queue     = (*Lock)(nil)
	_ lock.MultiLock = (*Lock)(nil)
	_ lock.Inspector = (*Lock)(nil)
	_ lock.Owned     = (*Lock)(nil)
)

// Option configures New.
type Option func(*config) error

type config struct {
	prefix string
	common lock.Common
	acks   rediscall.Acks
}

// WithPrefix sets the prefix of every Redis key and of the release channel
// (default DefaultPrefix). Instances that should see each other's locks use
// the same prefix. It may not contain braces (hash tags are the keys' own)
// nor "|", which separates the fields of a queued waiter's entry (its
// inbox channel, named after the prefix, is one of them: a "|" in it sent
// every handoff to an owner no one is).
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if strings.ContainsAny(prefix, "{}|") {
			return fmt.Errorf("prefix %q contains a brace or a \"|\"", prefix)
		}
		c.prefix = prefix
		return nil
	}
}

// WithCommon sets the owner identity stored with every grant (default a
// fresh lock.NewOwner) and where logs, metrics and spans go.
func WithCommon(c lock.Common) Option {
	return func(cfg *config) error { cfg.common = cfg.common.Merge(c); return nil }
}

// New returns a Lock over client (a *redis.Client, *redis.ClusterClient,
// failover client or ring: any UniversalClient). It sends nothing until the
// first operation.
func New(client redis.UniversalClient, opts ...Option) (*Lock, error) {
	if client == nil {
		return nil, backendkit.Invalid("redislock", "nil client")
	}
	cfg := config{prefix: DefaultPrefix}
	if err := backendkit.Apply("redislock", &cfg, opts); err != nil {
		return nil, err
	}
	c, err := backendkit.Resolve("redislock", cfg.common, "")
	if err != nil {
		return nil, err
	}
	if err := cfg.acks.CheckClient(client); err != nil {
		return nil, backendkit.Invalid("redislock", "%w", err)
	}
	l := &Lock{
		acks:    cfg.acks,
		client:  client,
		bounds:  rediscall.For(client),
		prefix:  cfg.prefix,
		channel: cfg.prefix + "released",
		inbox:   cfg.prefix + "inbox:" + attemptID(),
		owner:   c.Owner,
		log:     c.Logger,
		metrics: backendkit.NewTelemetry(c).Backend("redislock"),
	}
	l.channelArg, l.inboxArg = l.channel, l.inbox
	return l, nil
}

// Owner is this instance's owner identity, stored with every grant.
func (l *Lock) Owner() string { return l.owner }

// limits are the bounds of every Lock's input.
var limits = lock.Limits{MinTTL: MinTTL, MaxTTL: MaxTTL, MaxKeys: MaxKeys, MaxGroupKeys: MaxGroupKeys}

// Limits implements lock.Limited: MinTTL, MaxTTL, MaxKeys and MaxGroupKeys.
func (l *Lock) Limits() lock.Limits { return limits }

// Limits implements lock.Limited for Keep.
func (h *handle) Limits() lock.Limits { return limits }

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// TryAcquire implements lock.Lock in one round trip.
func (l *Lock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	return l.acquireOne(ctx, key, ttl, "")
}

// queuePlaceKept is how long a queued waiter keeps its place without
// another attempt; a waiter tries again at least every half of it, so only
// one that stopped (crashed, or gone without saying) loses its place.
const queuePlaceKept = 2 * time.Second

// AcquireQueued implements lock.Queue with a queue of waiters per key kept
// in Redis: a failed attempt puts the waiter in it (at its arrival place),
// and a release hands the key straight to the first live waiter of the
// queue (handoff.lua) and tells it alone, by a message on the release
// channel; the others sleep on. A handoff costs the release and nothing
// more: the waiter holds the key when the message arrives. A waiter tries
// again when the holder's remaining ttl has passed (a holder that crashed
// does not release), and at least every second, which keeps its place; one
// that stops trying loses its place two seconds later (a waiter that
// crashed within those seconds may be handed the key, which then frees
// after its ttl, as for a crashed holder). A waiter whose context ends
// leaves the queue, releasing the key if it was handed it meanwhile.
// lock.Acquire uses it: waiters are served in arrival order (a newcomer's
// first attempt may still win a key that is free because its holder's
// grant expired).
func (l *Lock) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (h lock.Handle, err error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	// The waiter's id, and what its handoff message notifies: "<key>\x00<id>".
	var id [16]byte
	var b strings.Builder
	b.Grow(len(key) + 1 + len(id))
	b.WriteString(key)
	b.WriteByte(0)
	b.Write(strconv.AppendUint(id[:0], rand.Uint64(), 36))
	to := b.String()
	waiter := to[len(key)+1:]
	// The handoff's message, and a plain release of the key: a release
	// looks at ten entries of the queue at most, and when those are all
	// lapsed (waiters that crashed or could not leave) it hands the key to
	// no one and announces it to every subscriber; the live waiters behind
	// them try at once rather than at their next periodic attempt.
	sub := l.notifier.Subscribe(to, key)
	defer func() {
		l.handedMu.Lock()
		sub.Close()
		delete(l.handed, waiter)
		l.handedMu.Unlock()
	}()
	if err := l.ensureSubscribed(ctx); err != nil {
		return nil, err
	}
	queued := false
	defer func() {
		if err != nil && queued { // leave the queue; if this fails, the place lapses
			qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = l.run(qctx, leaveScript, l.queueKeys(key), waiter, l.channel, key, ms(fenceLifetime)).Err()
		}
	}()
	a := l.attempt(key, ttl, waiter) // for every attempt and the handoff
	for {
		sent := time.Now()
		granted, err := l.try(ctx, a)
		if err == nil || !errors.Is(err, lock.ErrNotAcquired) {
			return granted, err
		}
		queued = true
		wait := queuePlaceKept / 2
		if hint := lock.RemainingTTL(err); hint > 0 && hint < wait {
			wait = hint + time.Millisecond
		}
		if err := sub.Wait(ctx, wait); err != nil {
			return nil, err
		}
		l.handedMu.Lock()
		g, ok := l.handed[waiter]
		delete(l.handed, waiter)
		l.handedMu.Unlock()
		if ok {
			// The grant was made g.waited after this waiter's last attempt
			// before it reached the server. That is the last attempt,
			// sent at sent, unless the message came late: the server
			// refused that attempt after the handoff (the grant was gone
			// by then: expired, or forced away), or the grant is past its
			// validity by that count. Then the message is of no use: the
			// next attempt finds the grant if it still lives
			// (acquire.lua returns a waiter's own grant, with what is left
			// of its ttl).
			validFrom := sent.Add(max(0, g.waited-time.Millisecond))
			validUntil := backendkit.ValidUntil(validFrom, ttl)
			if a.rare.refusedAt >= g.sinceUs || !time.Now().Before(validUntil) {
				continue
			}
			a.granted(g.token, []byte(g.since), validUntil)
			if l.acks.N > 0 {
				// The releaser's WAIT may have fallen short after the
				// handoff was published: an acknowledged extension of
				// our own covers the handoff, which came before it.
				if err := a.Extend(ctx, ttl); err != nil {
					if errors.Is(err, lock.ErrUnavailable) {
						l.undo(ctx, a)
					}
					l.metrics.Attempt(ctx, sent, err)
					return nil, err
				}
			}
			h, err := backendkit.Deliver(a, nil)
			l.metrics.Attempt(ctx, sent, err)
			return h, err
		}
	}
}

// handedGrant is a grant that a release handed to a queued waiter
// (handoff.lua), as its message told it.
type handedGrant struct {
	token   uint64
	since   string        // the grant's server time in µs, as in its value
	sinceUs int64         // the same, as a number
	waited  time.Duration // from the waiter's last attempt to the grant, on the server
}

// parseHanded reads a handoff message's "<key>\x00<waiter>\x00<token>\x00<since
// µs>\x00<waited ms>" (after its "\x02"), from the right: a key may hold
// NUL bytes (lock.CheckKey takes any), the other fields never do. Read
// from the left, a key with a NUL made a message of six parts, which was
// dropped: its waiter slept until its next attempt.
func parseHanded(payload string) (to string, waiter string, g handedGrant, ok bool) {
	var parts [4]string // waiter, token, since, waited: parts of payload, no copies
	key := payload
	for i := len(parts) - 1; i >= 0; i-- {
		j := strings.LastIndexByte(key, 0)
		if j < 0 {
			return "", "", g, false
		}
		parts[i], key = key[j+1:], key[:j]
	}
	tok, err1 := strconv.ParseUint(parts[1], 10, 64)
	waited, err2 := strconv.ParseInt(parts[3], 10, 64)
	since, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || parts[0] == "" {
		return "", "", g, false
	}
	to = payload[:len(key)+1+len(parts[0])]
	return to, parts[0], handedGrant{tok, parts[2], since, backendkit.RemainingMillis(waited)}, true
}

// Waiting implements lock.Queue: the waiters in key's queue whose place
// has not lapsed, in one round trip per 1,000 waiters (a script looks at
// 1,000 at most, so that none runs long; a queue that changes meanwhile
// may be miscounted by the waiters that moved).
func (l *Lock) Waiting(ctx context.Context, key string) (int, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return 0, err
	}
	keys := []string{l.queueKey(key), l.deadlinesKey(key)}
	total := 0
	for from := 0; ; from += 1000 {
		r, err := l.run(ctx, waitingScript, keys, from).Int64Slice()
		if err == nil && len(r) != 2 {
			err = fmt.Errorf("unexpected reply %v", r)
		}
		if err != nil {
			return 0, backendkit.Unavailable("redislock: waiting", err)
		}
		total += int(r[0])
		if r[1] == 0 {
			return total, nil
		}
	}
}

// scriptKeys is the most keys one acquire script looks at, so that no call
// blocks Redis for long: over 512 held keys it runs for about 1.2 ms of
// server time (over 1024, about 2.4 ms on average and up to 8 ms measured:
// BenchmarkScriptServerTime).
const scriptKeys = 512

// TryAcquireAny implements lock.MultiLock in one round trip for up to 512
// keys, starting at a random key; more keys are tried in scripts of 512
// keys each, one after the other from a random one, until one grants a
// key. On Redis Cluster all keys must share a hash tag (the semaphore's
// do).
func (l *Lock) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.ValidateKeys(ctx, keys, ttl, limits); err != nil {
		return nil, err
	}
	if len(keys) <= scriptKeys {
		return l.acquire(ctx, keys, ttl, rand.N(len(keys)), "")
	}
	n := (len(keys) + scriptKeys - 1) / scriptKeys
	off := rand.N(n)
	var shortest time.Duration
	for i := range n {
		b := (off + i) % n
		part := keys[b*scriptKeys : min((b+1)*scriptKeys, len(keys))]
		h, err := l.acquire(ctx, part, ttl, rand.N(len(part)), "")
		if err == nil || !errors.Is(err, lock.ErrNotAcquired) {
			return h, err
		}
		if r := lock.RemainingTTL(err); r > 0 && (shortest == 0 || r < shortest) {
			shortest = r
		}
	}
	return nil, backendkit.NotAcquiredAny(keys, shortest)
}

// attemptID is a fresh random id: of an acquire attempt (a retried acquire
// finds its own grant by it) and of a queued waiter.
func attemptID() string { return strconv.FormatUint(rand.Uint64(), 36) }

// acquire makes one attempt; waiter, for one key, names the queued waiter
// the attempt is made for (see AcquireQueued).
func (l *Lock) acquire(ctx context.Context, keys []string, ttl time.Duration, offset int, waiter string) (lock.Handle, error) {
	if len(keys) == 1 {
		return l.acquireOne(ctx, keys[0], ttl, waiter)
	}
	var id [16]byte
	tail := string(strconv.AppendUint(id[:0], rand.Uint64(), 36)) + "|" + l.owner
	all := make([]redisKeys, len(keys))
	rkeys := make([]string, 0, 2*len(keys))
	for i, k := range keys {
		all[i], _ = l.keysOf(k, nil)
		rkeys = append(rkeys, all[i][0], all[i][1])
	}
	sent := time.Now()
	cmd, acked := l.write(ctx, acquireScript, callOf(acquireScript, rkeys, []any{tail, ms(ttl), offset, fenceLifetimeArg}))
	r, err := l.granted(ctx, keys, ttl, sent, cmd)
	if err != nil {
		return nil, err
	}
	h := &handle{l: l, key: keys[r.index], keys: all[r.index], tail: tail}
	return l.finish(ctx, h, r, sent, acked)
}

// acquireOne is acquire for one key, with one allocation for the keys and
// one for the grant, which also holds the script's call.
func (l *Lock) acquireOne(ctx context.Context, key string, ttl time.Duration, waiter string) (lock.Handle, error) {
	return l.try(ctx, l.attempt(key, ttl, waiter))
}

// attempt is the grant that acquireOne's attempts for a waiter (or a fresh
// attempt id, for none) would make; its keys and value's tail are built once
// for all of them.
func (l *Lock) attempt(key string, ttl time.Duration, waiter string) *handle {
	var id [16]byte
	attempt := append(id[:0], waiter...)
	if waiter == "" {
		attempt = strconv.AppendUint(attempt, rand.Uint64(), 36)
	}
	h := &handle{l: l, key: key, ttl: ms(ttl)}
	h.keys, h.tail = l.keysOf(key, attempt)
	if waiter != "" {
		h.rare = &rareParts{waiter: h.tail[:len(attempt)]}
	}
	return h
}

// try makes one attempt for h and returns h when it is granted. It may be
// called again for h after a failed attempt, until then.
func (l *Lock) try(ctx context.Context, h *handle) (lock.Handle, error) {
	nkeys := 2
	if h.waiter() != "" {
		nkeys = 4
	}
	// The call's arguments point at h's fields, in an array from the pool
	// (calls.go), not in h.
	args := getCall()
	defer putCall(ctx, args)
	call := acquireScript.Start(args[:0], nkeys)
	for i := range nkeys {
		call = append(call, &h.keys[i])
	}
	// Each argument costs the client and the server: an attempt without a
	// waiter sends only the four it uses.
	call = append(call, &h.tail, &h.ttl, 0, fenceLifetimeArg)
	if h.waiter() != "" {
		call = append(call, &h.rare.waiter, queuePlaceKeptArg, l.inboxArg)
	}
	sent := time.Now()
	cmd, acked := l.write(ctx, acquireScript, call)
	r, err := l.granted(ctx, []string{h.key}, time.Duration(h.ttl)*time.Millisecond, sent, cmd)
	if err != nil {
		if r.since != 0 {
			h.rare.refusedAt = r.since
		}
		return nil, err
	}
	return l.finish(ctx, h, r, sent, acked)
}

// acquired is a grant as acquire.lua reports it.
type acquired struct {
	index int
	token uint64
	since int64         // server time of the grant, µs
	left  time.Duration // of its ttl, when the script ran
}

// granted reads acquire.lua's reply to an attempt on keys: {1, token,
// index, granted at µs, remaining ttl ms} or {0, shortest remaining ttl
// ms}. It records a failed attempt.
func (l *Lock) granted(ctx context.Context, keys []string, ttl time.Duration, sent time.Time, cmd *redis.Cmd) (acquired, error) {
	var r [5]int64
	res, err := cmd.Slice()
	n := len(res)
	for i := range min(n, len(r)) {
		switch v := res[i].(type) {
		case int64:
			r[i] = v
		case string: // the token and time: numbers beyond Lua's integers
			r[i], err = strconv.ParseInt(v, 10, 64)
		default:
			n = -1
		}
	}
	switch {
	case err != nil && strings.HasPrefix(err.Error(), "CROSSSLOT"):
		err = fmt.Errorf("%w: on Redis Cluster the keys of one TryAcquireAny must share a hash tag ({…}): %w", lock.ErrInvalidKey, err)
	case err != nil:
		err = backendkit.Unavailable("redislock: acquire", err)
	case (n == 2 || n == 3) && r[0] == 0 && len(keys) == 1:
		err = backendkit.NotAcquired(keys[0], backendkit.RemainingMillis(r[1]))
		if n == 3 { // a queued attempt: when the server refused it
			l.metrics.Attempt(ctx, sent, err)
			return acquired{since: r[2]}, err
		}
	case n == 2 && r[0] == 0:
		err = backendkit.NotAcquiredAny(keys, backendkit.RemainingMillis(r[1]))
	case n == 5 && r[0] == 1 && r[2] >= 0 && int(r[2]) < len(keys):
		// r[4] is the ttl, or what is left of it for a grant this attempt
		// found already made (a retried command, or a handoff whose message
		// was missed): the script ran after sent, so expiry comes after
		// sent plus that.
		return acquired{int(r[2]), uint64(r[1]), r[3], min(ttl, backendkit.RemainingMillis(r[4]))}, nil
	default:
		err = backendkit.Unavailable("redislock: acquire", fmt.Errorf("unexpected reply %v", res))
	}
	l.metrics.Attempt(ctx, sent, err)
	return acquired{}, err
}

// finish completes h, the grant r; under WithReplicaAcks, a grant whose
// write was not acknowledged (acked) is released again.
func (l *Lock) finish(ctx context.Context, h *handle, r acquired, sent time.Time, acked error) (lock.Handle, error) {
	var since [20]byte
	h.granted(r.token, strconv.AppendInt(since[:0], r.since, 10), backendkit.ValidUntil(sent, r.left))
	if acked != nil {
		l.undo(ctx, h)
		err := backendkit.Unavailable("redislock: acquire", acked)
		l.metrics.Attempt(ctx, sent, err)
		return nil, err
	}
	hd, err := backendkit.Deliver(h, nil)
	l.metrics.Attempt(ctx, sent, err)
	return hd, err
}

// handle is one grant.
type handle struct {
	l    *Lock
	key  string
	keys redisKeys // keys[0] holds the grant
	tail string    // of the grant's value: "<attempt>|<owner>"
	// rare is what a queued attempt or a share has besides, else nil: an
	// exclusive grant held by a Keeper costs that much less.
	rare   *rareParts
	ttl    int64 // the acquire call's ttl, ms
	token  uint64
	value  string // the grant's value, "<token>|<since µs>|<tail>"
	digits string // of value: the token
	// ext is Extend's call for the last ttl asked for (Keep asks the same
	// every time), shared by the calls with that ttl.
	ext atomic.Pointer[extendCall]

	lease
}

// rareParts are the parts of a handle that only a queued attempt or a
// share has.
type rareParts struct {
	waiter string // of a queued attempt: the waiter's id
	// of a queued attempt: the server's time (µs) when it last refused it
	refusedAt int64
	// of a share (TryAcquireShared): the key's shares and their index
	shares, attempts string
}

// waiter is the id of h's queued attempt, or "".
func (h *handle) waiter() string {
	if h.rare == nil {
		return ""
	}
	return h.rare.waiter
}

// shared says whether h is a share.
func (h *handle) shared() bool { return h.rare != nil && h.rare.shares != "" }

// lease is the local state of a grant (a handle) or of a group.
type lease struct {
	mu         sync.Mutex
	validUntil time.Time
	released   bool
}

func (s *lease) ValidUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// isReleased reports whether Release was called.
func (s *lease) isReleased() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

// release records a Release and reports whether one was made before.
func (s *lease) release() (before bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, s.released = s.released, true
	return before
}

// extendedIf is the outcome of an extension for ttl sent at sent, which
// the server answered with err, gone (the grant is gone: lost's error) and
// acked (see write); a success is recorded.
func (s *lease) extendedIf(op string, sent time.Time, ttl time.Duration, err error, gone bool, acked error, lost func() error) error {
	switch {
	case err != nil:
		return backendkit.Unavailable(op, err)
	case gone:
		return lost()
	case acked != nil:
		return backendkit.Unavailable(op, acked)
	}
	s.mu.Lock()
	s.validUntil = backendkit.ValidUntil(sent, ttl)
	s.mu.Unlock()
	return nil
}

type extendCall struct {
	ttl  int64
	n    int            // of args, in use
	args [3 + 3 + 2]any // a share's Extend has three keys
}

// granted records the grant of token at since (µs, in digits) and builds
// Release's call.
func (h *handle) granted(token uint64, since []byte, validUntil time.Time) {
	var buf [128]byte
	v := strconv.AppendUint(buf[:0], token, 10)
	n := len(v)
	v = append(v, '|')
	v = append(v, since...)
	v = append(v, '|')
	v = append(v, h.tail...)
	h.token, h.value, h.validUntil = token, string(v), validUntil
	h.digits = h.value[:n]
}

// releaseCall is Release's script and call, pointing at h's fields, in
// args.
func (h *handle) releaseCall(args *[callArgs]any) (*rediscall.Script, []any) {
	script, nkeys := h.releaseScript()
	call := script.Start(args[:0], nkeys)
	for i := range h.keys {
		call = append(call, &h.keys[i])
	}
	if h.shared() {
		call = append(call, &h.rare.shares, &h.rare.attempts)
	}
	return script, append(call, &h.value, h.l.channelArg, &h.key, &h.digits, fenceLifetimeArg)
}

// releaseScript is the script that releases h and its number of keys.
func (h *handle) releaseScript() (*rediscall.Script, int) {
	if h.shared() {
		return releaseSharedScript, len(h.keys) + 2
	}
	return releaseScript, len(h.keys)
}

// extendCall returns Extend's call with a ttl of ttl ms.
func (h *handle) extendCall(ttl int64) []any {
	if c := h.ext.Load(); c != nil && c.ttl == ttl {
		return c.args[:c.n]
	}
	c := &extendCall{ttl: ttl}
	var call []any
	if h.shared() {
		call = append(extendSharedScript.Start(c.args[:0], 3), &h.keys[0], &h.rare.shares, &h.rare.attempts, &h.value, &c.ttl)
	} else {
		call = append(extendScript.Start(c.args[:0], 1), &h.keys[0], &h.value, &c.ttl)
	}
	c.n = len(call)
	h.ext.Store(c)
	return call
}

func (h *handle) Key() string   { return h.key }
func (h *handle) Token() uint64 { return h.token }

func (h *handle) lost(what string) error {
	return fmt.Errorf("%w: %s of %q (token %d): the grant is gone", lock.ErrLost, what, h.key, h.token)
}

// Extend implements lock.Handle in one round trip.
func (h *handle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := limits.CheckTTL(ttl); err != nil {
		return err
	}
	if h.isReleased() {
		return h.lost("extend after release")
	}
	sent := time.Now()
	script := extendScript
	if h.shared() {
		script = extendSharedScript
	}
	cmd, acked := h.l.write(ctx, script, h.extendCall(ms(ttl)))
	n, err := cmd.Int64()
	return h.extendedIf("redislock: extend", sent, ttl, err, n == 0, acked, func() error { return h.lost("extend") })
}

// Release implements lock.Handle in one round trip, which also wakes the
// waiters of the key.
func (h *handle) Release(ctx context.Context) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if h.release() {
		return h.lost("second release")
	}
	// Not acknowledged under WithReplicaAcks: a release that a failover
	// loses leaves the grant to expire at its ttl (a delay, never a second
	// holder), and a handoff it makes is confirmed by its waiter.
	args := getCall()
	script, call := h.releaseCall(args)
	n, err := h.l.bounds.Eval(ctx, h.l.client, script, call).Int64()
	putCall(ctx, args)
	err = h.releasedIf(n, err)
	h.l.metrics.Release(ctx, err)
	return err
}

// releasedIf is the outcome of h's release, which the server answered
// with n (release_key.lua's) or err.
func (h *handle) releasedIf(n int64, err error) error {
	switch {
	case err != nil:
		// Unknown outcome: the grant may still be there; it expires with its ttl.
		return backendkit.Unavailable("redislock: release", err)
	case n == 2 && time.Now().Before(h.ValidUntil()):
		// Gone before its time, yet no grant was made since: this release
		// was sent twice (go-redis retries a command whose reply it did not
		// get) and the first took effect.
		return nil
	case n != 1:
		return h.lost("release")
	}
	return nil
}

// ForceRelease deletes key's grant whoever holds it (or all its shares) and wakes its waiters;
// it reports whether there was one. The holder learns of it at its next
// Extend or Release. An operator's tool: fencing still protects the
// resource from the evicted holder.
func (l *Lock) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return false, err
	}
	keys, _ := l.keysOf(key, nil)
	shares, attempts := l.shareKeys(keys)
	n, err := l.run(ctx, forceReleaseScript, append(keys[:], shares, attempts), l.channel, key, ms(fenceLifetime)).Int64()
	if err != nil {
		return false, backendkit.Unavailable("redislock: force release", err)
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
