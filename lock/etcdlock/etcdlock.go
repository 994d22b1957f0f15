package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

const (
	// DefaultPrefix starts every etcd key this package writes. Instances
	// that should see each other's locks use the same prefix.
	DefaultPrefix = "leasehold/lock/"
	// DefaultMinTTL is the smallest lease ttl granted unless WithMinTTL says
	// otherwise: etcd's own minimum for its default election timeout of
	// 1 s (ceil(1.5 × election timeout)). A smaller ttl is rounded up to it.
	DefaultMinTTL = 2 * time.Second
	// MaxTTL is the longest ttl (lock.MaxTTL; etcd itself grants leases
	// of up to 9,000,000,000 s).
	MaxTTL = lock.MaxTTL
	// MaxKeys is the most keys of one TryAcquireAny or Subscribe call
	// (lock.MaxKeys).
	MaxKeys = lock.MaxKeys

	// maxSpares is how many unused leases one Lock keeps per ttl.
	maxSpares = 4
	// bgTimeout bounds every request made in the background (spare grants,
	// revokes of leftovers).
	bgTimeout = 5 * time.Second
)

var errClosed = errors.New("etcdlock: Lock is closed")

// Lock is a lock.Lock on etcd. It is safe for concurrent use; share one per
// process and Close it at the end (the client stays the caller's).
type Lock struct {
	client  *clientv3.Client
	prefix  string
	owner   string
	minSec  int64
	log     *slog.Logger
	metrics *backendkit.BackendMetrics

	ctx    context.Context // ends at Close; background requests derive from it
	cancel context.CancelFunc
	bg     background // background requests

	poolMu  sync.Mutex
	spares  map[int64][]spare // unused leases by requested ttl in seconds
	filling map[int64]bool    // a background grant is under way
	closed  bool

	notifier backendkit.Notifier
	w        watchState
	hints    hintCache
	txnKeys  atomic.Int32 // keys per Txn of TryAcquireAny (see maxTxnKeys)

	intentMu sync.Mutex
	intents  map[string]clientv3.LeaseID // the last intent lease made per key (shared.go)
	intentN  atomic.Int32                // len(intents)
}

var (
	_ lock.Lock      = (*Lock)(nil)
	_ lock.Waiter    = (*Lock)(nil)
	_ lock.MultiLock = (*Lock)(nil)
	_ lock.Inspector = (*Lock)(nil)
	_ lock.Owned     = (*Lock)(nil)
)

// Option configures New.
type Option func(*config) error

type config struct {
	prefix string
	minTTL time.Duration
	common lock.Common
}

// WithCommon sets the owner identity stored with every grant (default a
// fresh lock.NewOwner) and where logs, metrics and spans go.
func WithCommon(c lock.Common) Option {
	return func(cfg *config) error { cfg.common = cfg.common.Merge(c); return nil }
}

// WithPrefix sets the prefix of every etcd key (default DefaultPrefix). A
// user's key k is stored as prefix+k; Inspector and the release watch look
// only under the prefix.
func WithPrefix(prefix string) Option {
	return func(s *config) error {
		if prefix == "" {
			return errors.New("empty prefix: the release watch would cover the whole keyspace")
		}
		s.prefix = prefix
		return nil
	}
}

// WithMinTTL sets the smallest lease ttl (default DefaultMinTTL, 2 s); a
// smaller ttl is rounded up to it. etcd itself refuses to expire a lease
// sooner than ceil(1.5 × its election timeout) and silently raises a
// shorter one; lower this only for servers run with a shorter election
// timeout than the default (1 s). It must be at least one second, the
// granularity of etcd leases.
func WithMinTTL(d time.Duration) Option {
	return func(s *config) error {
		if d < time.Second || d > MaxTTL {
			return fmt.Errorf("minimum ttl %v is outside [1s, %v]", d, MaxTTL)
		}
		s.minTTL = d
		return nil
	}
}

// New returns a Lock over client. It sends nothing until the first
// operation. For bounded failures, give the client a DialTimeout and every
// call a context with a deadline: the etcd client waits for a connection
// as long as the context allows.
func New(client *clientv3.Client, opts ...Option) (*Lock, error) {
	if client == nil {
		return nil, backendkit.Invalid("etcdlock", "nil client")
	}
	s := &config{prefix: DefaultPrefix, minTTL: DefaultMinTTL}
	if err := backendkit.Apply("etcdlock", s, opts); err != nil {
		return nil, err
	}
	cfg, err := backendkit.Resolve("etcdlock", s.common, "")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lock{
		client:  client,
		prefix:  s.prefix,
		owner:   cfg.Owner,
		minSec:  seconds(s.minTTL),
		log:     cfg.Logger,
		metrics: backendkit.NewTelemetry(cfg).Backend("etcdlock"),
		ctx:     ctx,
		cancel:  cancel,
		spares:  map[int64][]spare{},
		filling: map[int64]bool{},
	}
	l.txnKeys.Store(maxTxnKeys)
	return l, nil
}

// Owner is this instance's owner identity, stored with every grant.
func (l *Lock) Owner() string { return l.owner }

// MinTTL is the smallest lease ttl this Lock grants (see WithMinTTL).
func (l *Lock) MinTTL() time.Duration { return time.Duration(l.minSec) * time.Second }

func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// leaseSeconds is the lease ttl for a requested ttl: whole seconds, rounded
// up, and at least the minimum.
func (l *Lock) leaseSeconds(ttl time.Duration) int64 { return max(seconds(ttl), l.minSec) }

// limits are the bounds of every Lock's input: a ttl below the minimum
// lease is rounded up, not refused, down to 10 ms. ValidUntil counts the
// ttl asked for, and below 10 ms the drift allowance (2 ms and more) and a
// round trip leave a grant that has expired when its reply arrives.
var limits = lock.Limits{MinTTL: 10 * time.Millisecond, MaxTTL: MaxTTL, MaxKeys: MaxKeys, MaxGroupKeys: MaxGroupKeys}

// Limits implements lock.Limited: a ttl of at least 10 ms (one below
// MinTTL is rounded up to it, not refused), MaxTTL and MaxKeys.
func (l *Lock) Limits() lock.Limits { return limits }

// Limits implements lock.Limited for Keep.
func (h *handle) Limits() lock.Limits { return limits }

// value is what a grant stores: "<granted at>|<lease end>|<owner>", the
// times in µs since the epoch, built in one allocation. The lease end is
// the earliest the grant's lease can end, as the Lock knew it when it wrote
// the value (a renewal only moves it later): a waiter's hint, read with the
// holder's grant in the acquire's own Txn (see hints.go).
func (l *Lock) value(at, end time.Time) string {
	var b strings.Builder
	b.Grow(2*20 + 2 + len(l.owner))
	var digits [20]byte
	b.Write(strconv.AppendInt(digits[:0], at.UnixMicro(), 10))
	b.WriteByte('|')
	b.Write(strconv.AppendInt(digits[:0], end.UnixMicro(), 10))
	b.WriteByte('|')
	b.WriteString(l.owner)
	return b.String()
}

// TryAcquire implements lock.Lock. With a spare lease at hand (the usual
// case) it is one round trip: a Txn that puts the grant key, attached to
// the lease, if the key's range holds no grant (see keys.go). When the key is held, a second request
// reads the holder's remaining lease ttl for the error's hint, unless the
// Lock learnt it recently (see hints.go).
func (l *Lock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	return l.acquire(ctx, []string{key}, ttl)
}

// TryAcquireAny implements lock.MultiLock in one round trip: one Txn whose
// else branches nest, one level per key, starting at a random key, so the
// first free key in that order is put and the others are left alone.
func (l *Lock) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.ValidateKeys(ctx, keys, ttl, limits); err != nil {
		return nil, err
	}
	order := make([]string, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	off := rand.N(len(keys))
	for i := range keys {
		k := keys[(off+i)%len(keys)]
		if !seen[k] {
			seen[k] = true
			order = append(order, k)
		}
	}
	return l.acquire(ctx, order, ttl)
}

func (l *Lock) acquire(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	start := time.Now()
	h, err := l.tryAcquire(ctx, keys, ttl)
	l.metrics.Attempt(ctx, start, err)
	return h, err
}

// txnFor builds the nested Txn over the grant keys gks[i:]: put gks[i] if
// its key holds no grant and no share, else read the first of them (an
// exclusive grant sorts before the shares) and try the rest.
func txnFor(gks []string, value string, lease clientv3.LeaseID) (cmps []clientv3.Cmp, then, els []clientv3.Op) {
	start := grantStart(gks[0])
	end := start + holdEndMark
	cmps = []clientv3.Cmp{rangeEmpty(start, end)}
	then = []clientv3.Op{clientv3.OpPut(gks[0], value, clientv3.WithLease(lease))}
	els = []clientv3.Op{clientv3.OpGet(start, clientv3.WithRange(end), clientv3.WithLimit(1))}
	if len(gks) > 1 {
		c, t, e := txnFor(gks[1:], value, lease)
		els = append(els, clientv3.OpTxn(c, t, e))
	}
	return cmps, then, els
}

// rangeEmpty is the compare "no key in [start, end)". It fills the
// clientv3.Cmp's request in place: clientv3.Compare and WithRange each
// copy it with proto.Clone (reflection, microseconds each), and the Txn's
// If copies it once more anyway.
func rangeEmpty(start, end string) clientv3.Cmp {
	c := clientv3.CreateRevision(start)
	pc := c.GetCompare()
	pc.Result = pb.Compare_EQUAL
	pc.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: 0}
	pc.RangeEnd = []byte(end)
	return c
}

func (l *Lock) tryAcquire(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	return l.attempt(ctx, ttl, func(sp spare) (lock.Handle, error) {
		h, holders, err := l.tryChunks(ctx, keys, ttl, sp)
		switch {
		case err != nil:
			return nil, err
		case h != nil:
			l.dropIntent(h.Key())
			return h, nil
		}
		if len(keys) == 1 && len(holders) == 1 && holders[0].intent != "" {
			// Refused because of shares: keep them from growing.
			l.markIntent(ctx, keys[0], holders[0].intent)
		}
		return nil, backendkit.NotAcquiredAny(keys, l.remaining(ctx, holders, false))
	})
}

// attempt runs try with a lease of ttl, a spare if there is one. try
// returns the grant, a refusal (lock.ErrNotAcquired, or
// lock.ErrInvalidArgument: nothing was written, the lease goes back to
// the spares) or another error, whose outcome is unknown.
func (l *Lock) attempt(ctx context.Context, ttl time.Duration, try func(sp spare) (lock.Handle, error)) (lock.Handle, error) {
	sec := l.leaseSeconds(ttl)
	for attempt := 0; ; attempt++ {
		sp, err := l.lease(ctx, sec, ttl)
		if err != nil {
			return nil, err
		}
		h, err := try(sp)
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && attempt == 0:
			// The spare is gone (revoked by an operator, or the server
			// lost it): nothing was written. Try once more with a new lease.
			continue
		case errors.Is(err, lock.ErrNotAcquired), errors.Is(err, lock.ErrInvalidArgument):
			l.giveBack(sp)
			return nil, err
		case err != nil:
			// Unknown outcome: the key may be ours. Revoking the lease
			// deletes it if so, and frees the lease otherwise.
			l.revokeLater(sp.id)
			return nil, backendkit.Unavailable("etcdlock: acquire", err)
		}
		return backendkit.Deliver(h, nil)
	}
}

// maxTxnKeys is the most keys one Txn of TryAcquireAny nests. Each key is a
// level of two operations, and etcd refuses a Txn of more operations than
// its --max-txn-ops (128 by default) counted down the levels: 64 keys fit.
// A server run with a smaller --max-txn-ops refuses such a Txn before it
// does anything; the Lock then halves its batch (Lock.txnKeys) and goes on.
const maxTxnKeys = 64

// tryChunks tries keys in order, in Txns of at most txnKeys keys each, and
// stops at the first key put. Every Txn is atomic on its own and puts at
// most one key, so the first free key in order is granted, as with one
// Txn; only the keys' holders are read in more than one round trip. It
// returns the grant, or nil and the holders read on the way.
func (l *Lock) tryChunks(ctx context.Context, keys []string, ttl time.Duration, sp spare) (lock.Handle, []holder, error) {
	var holders []holder
	for len(keys) > 0 {
		n := min(len(keys), int(l.txnKeys.Load()))
		chunk := keys[:n]
		var one [1]string // no allocation for TryAcquire
		gks := one[:]
		if n > 1 {
			gks = make([]string, n)
		}
		for i, k := range chunk {
			gks[i] = l.grantKey(k, sp.id)
		}
		sent := time.Now()
		value := l.value(sent, sp.end())
		cmps, then, els := txnFor(gks, value, sp.id)
		resp, err := l.client.Txn(requireLeader(ctx)).If(cmps...).Then(then...).Else(els...).Commit()
		if errors.Is(err, rpctypes.ErrTooManyOps) && n > 1 {
			// Refused whole, before anything was done: batches of at most
			// half of this one, from now on.
			for cur := l.txnKeys.Load(); cur > int32(n/2) && !l.txnKeys.CompareAndSwap(cur, int32(n/2)); cur = l.txnKeys.Load() {
			}
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		idx, hs := granted(resp)
		if idx >= 0 {
			return &handle{
				l: l, key: chunk[idx], ekey: gks[idx], token: uint64(resp.Header.Revision),
				since: sent, lease: sp,
				validUntil: validUntil(sent, ttl, sp),
			}, nil, nil
		}
		holders = append(holders, hs...)
		keys = keys[n:]
	}
	return nil, holders, nil
}

// validUntil is the grant's deadline: from the send time with the requested
// ttl, but never past the lease's own end, which counts from the send time
// of its grant (or last renewal) with the ttl the server granted.
func validUntil(sent time.Time, ttl time.Duration, sp spare) time.Time {
	vu := backendkit.ValidUntil(sent, ttl)
	if end := backendkit.ValidUntil(sp.sent, sp.granted); end.Before(vu) {
		return end
	}
	return vu
}

// granted walks the nested Txn's responses: the index of the key that was
// put, or -1 and the holders read on the way.
func granted(r *clientv3.TxnResponse) (int, []holder) {
	var hs []holder
	for i := 0; r != nil; i++ {
		if r.Succeeded {
			return i, nil
		}
		var next *clientv3.TxnResponse
		for _, op := range r.Responses {
			hs = appendHolder(hs, op.GetResponseRange())
			if tr := op.GetResponseTxn(); tr != nil {
				next = (*clientv3.TxnResponse)(tr)
			}
		}
		r = next
	}
	return -1, hs
}

// appendHolder appends the first key-value of a range read, if any, as a
// holder. When it is a share, the holder names the key's intent key.
func appendHolder(hs []holder, rr *pb.RangeResponse) []holder {
	if rr == nil || len(rr.Kvs) == 0 {
		return hs
	}
	kv := rr.Kvs[0]
	h := holder{lease: kv.Lease}
	if v, ok := parseValue(string(kv.Value)); ok {
		h.end = v.end
	}
	if k := string(kv.Key); len(k) > idLen+len(shareMark) {
		if start := k[:len(k)-idLen-len(shareMark)]; strings.HasSuffix(start, keyEnd) && k[len(start):len(start)+len(shareMark)] == shareMark {
			h.intent = start + intentMark
		}
	}
	return append(hs, h)
}

// Close ends the release watch, revokes the spare leases and waits for
// background requests. The client stays open: it is the caller's.
// Subscriptions still open are woken. Operations after Close fail.
func (l *Lock) Close() error {
	l.poolMu.Lock()
	if l.closed {
		l.poolMu.Unlock()
		return nil
	}
	l.closed = true
	l.poolMu.Unlock()
	l.stopWatch()
	l.cancel() // spare grants under way; revokes run on to their own timeout
	l.bg.Wait()
	l.poolMu.Lock()
	var ids []clientv3.LeaseID
	for _, ss := range l.spares {
		for _, s := range ss {
			ids = append(ids, s.id)
		}
	}
	l.spares = map[int64][]spare{}
	l.poolMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), bgTimeout)
	defer cancel()
	var errs []error
	for _, id := range ids {
		if _, err := l.client.Revoke(requireLeader(ctx), id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, err)
		}
	}
	l.notifier.NotifyAll()
	if err := errors.Join(errs...); err != nil {
		return backendkit.Unavailable("etcdlock: close: revoking spare leases", err)
	}
	return nil
}

func (l *Lock) isClosed() bool {
	l.poolMu.Lock()
	defer l.poolMu.Unlock()
	return l.closed
}

// requireLeader marks a call so that a member without a leader (cut off
// from its peers, or in an election) refuses it at once with ErrNoLeader,
// instead of holding it until its request timeout (seconds): the attempt
// fails as unavailable and the next one goes to another member, well
// within a holder's ValidUntil. Watches are marked so too (waiter.go).
// A context without outgoing metadata (the usual case) gets leaderMD, built
// once, instead of a new copy per call (clientv3.WithRequireLeader); gRPC
// and the etcd client copy metadata before they change it.
func requireLeader(ctx context.Context) context.Context {
	if _, ok := metadata.FromOutgoingContext(ctx); ok {
		return clientv3.WithRequireLeader(ctx)
	}
	return metadata.NewOutgoingContext(ctx, leaderMD)
}

var leaderMD = metadata.Pairs(rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)
