package pglock

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// MaxGroupKeys is the most keys of one TryAcquireAll (the MaxKeys of a
// Group's Limits). Each key of a held group takes an entry of the server's
// shared lock table, which has max_locks_per_transaction (64 by default)
// entries per connection: a group of up to that many uses no more than
// its session's share.
const MaxGroupKeys = 64

// groupKeys are the advisory locks of a group, sorted by id, with the
// arguments of its release.
type groupKeys struct {
	ids      []int64
	his, los []int32
	payloads []string
}

// TryAcquireAll implements lock.GroupLock in one statement on a connection
// of its own, which the group keeps until Release: it tries every key's
// advisory lock in the order of their ids (so two groups never wait for
// each other) and, when one is held, unlocks those it took and reports the
// held key with the longest remaining ttl among the set's holders. Each key
// draws its own token from the sequence; the group's keys and tokens are
// recorded (table leasehold_group_keys) for Inspect and List, whose
// Grant.Group is the group's first token. A refusal holds new shared
// grants of the set's keys held shared off for lock.IntentTTL, as
// TryAcquire's does. At most MaxGroupKeys keys; a full lock table gives
// ErrLockTableFull.
func (l *Lock) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (g lock.Group, err error) {
	if err := backendkit.ValidateGroup(ctx, keys, ttl, limits); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { l.metrics.Attempt(ctx, start, err) }()
	if err := l.ensureSetup(ctx); err != nil {
		return nil, err
	}
	order := make([]int, len(keys)) // indexes of keys in the order of their ids
	ids := make([]int64, len(keys))
	for i, k := range keys {
		order[i], ids[i] = i, l.id(k)
	}
	slices.SortFunc(order, func(a, b int) int { return compareIDs(ids[a], ids[b]) })
	gk := &groupKeys{ids: make([]int64, len(keys))}
	for i, o := range order {
		id := ids[o]
		gk.ids[i] = id
		hi, lo := interest(id)
		gk.his, gk.los, gk.payloads = append(gk.his, hi), append(gk.los, lo), append(gk.payloads, payload(id))
	}
	c, err := l.conn(ctx, keys, ttl, false)
	if err != nil {
		return nil, err
	}
	hd := &handle{l: l, key: strings.Join(keys, ","), id: gk.ids[0], group: gk}
	expect := int32(c.Conn().PgConn().PID())
	hd.setTTL(ttl)
	sql, args := l.sql.all[0], []any{gk.ids, expect, l.pooled, l.ttlGUC, string(hd.ttlText), l.appOwner}
	register := l.unregistered(gk.ids...)
	if register {
		names := make([][]byte, len(keys))
		for i, o := range order {
			names[i] = []byte(keys[o])
		}
		sql, args = l.sql.all[1], append(args, names, l.namespace)
	}
	var pid int32
	var res []byte
	sent := time.Now()
	err = c.QueryRow(ctx, sql, args...).Scan(&pid, &res)
	if err == nil && register {
		l.registered(gk.ids...)
	}
	switch {
	case err != nil:
		return nil, l.failed(c, keys[0], err)
	case pid != expect && !l.pooled:
		c.Release()
		return nil, poolerMismatch(pid, expect)
	case len(res) > 0 && res[0] == 'h':
		c.Release()
		bad, ms, _ := strings.Cut(string(res[1:]), " ")
		i, _ := strconv.Atoi(bad)
		if i < 1 || i > len(keys) {
			return nil, backendkit.Unavailable("pglock: acquire", errors.New("unexpected reply "+strconv.Quote(string(res))))
		}
		var rem time.Duration
		if n, err := strconv.ParseInt(ms, 10, 64); err == nil {
			rem = heldFor(n)
		}
		return nil, backendkit.NotAcquired(keys[order[i-1]], rem)
	}
	toks, rest, _ := bytes.Cut(res, []byte{' '})
	tokens, ok := parseTokens(string(toks), order)
	_, ran, app, ok2 := parseGrantReply(append([]byte("0 "), rest...))
	hd.build(pid)
	if !ok || !ok2 || !hd.setApp(app) {
		destroy(c)
		return nil, backendkit.Unavailable("pglock: acquire", errors.New("unexpected reply "+strconv.Quote(string(res))))
	}
	h, err := l.handOut(hd, c, pid, sent, ran)
	if err != nil {
		return nil, err
	}
	return &group{h: h.(*handle), keys: slices.Clone(keys), tokens: tokens}, nil
}

func compareIDs(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseTokens reads the comma-separated tokens of a group's keys, in the
// order of their ids, into the caller's order.
func parseTokens(s string, order []int) ([]uint64, bool) {
	parts := strings.Split(s, ",")
	if len(parts) != len(order) {
		return nil, false
	}
	out := make([]uint64, len(order))
	for i, p := range parts {
		t, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, false
		}
		out[order[i]] = t
	}
	return out, true
}

// extend renews the group's ttl (extendAll), reporting whether the session
// still holds every key.
func (gk *groupKeys) extend(ctx context.Context, h *handle) (bool, error) {
	var res *string
	err := h.conn.QueryRow(ctx, h.l.sql.extendAll, h.pid, gk.ids, h.l.ttlGUC, string(h.ttlText),
		string(h.appHead), string(h.appTail)).Scan(&res)
	return res != nil, err
}

// release unlocks the group's keys (releaseAll), reporting whether the
// session held every one.
func (gk *groupKeys) release(ctx context.Context, h *handle) (bool, error) {
	l := h.l
	var res *string
	err := h.conn.QueryRow(ctx, l.sql.releaseAll, gk.ids, l.ttlGUC, l.ttlReset, gk.his, gk.los, l.channel,
		gk.payloads).Scan(&res)
	return res != nil && *res == strconv.Itoa(len(gk.ids)), err
}

// group is a lock.Group: one session holds every key.
type group struct {
	h      *handle
	keys   []string
	tokens []uint64
}

var _ lock.Group = (*group)(nil)

func (g *group) Keys() []string        { return slices.Clone(g.keys) }
func (g *group) Tokens() []uint64      { return slices.Clone(g.tokens) }
func (g *group) ValidUntil() time.Time { return g.h.ValidUntil() }

// Extend implements lock.Group in one round trip: it checks that the
// session holds every key and resets its idle_session_timeout to ttl.
func (g *group) Extend(ctx context.Context, ttl time.Duration) error { return g.h.Extend(ctx, ttl) }

// Release implements lock.Group in one round trip: it notifies the keys'
// waiters, unlocks every key and gives the connection back.
func (g *group) Release(ctx context.Context) error { return g.h.Release(ctx) }

// Limits implements lock.Limited for lock.DoAll's renewals.
func (g *group) Limits() lock.Limits { return limits }

// Lost implements lock.LossNotifier, as a Handle's.
func (g *group) Lost() <-chan struct{} { return g.h.Lost() }
