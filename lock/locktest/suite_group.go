package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

func (s *suite) newGroup(t testing.TB) lock.GroupLock { return s.newLock(t).(lock.GroupLock) }

// groupKeys returns n keys unique to the test. They share a hash tag, as
// the keys of one all-of grant must on Redis Cluster.
func (s *suite) groupKeys(t testing.TB, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = s.key(t, fmt.Sprintf("{g}/%d", i))
	}
	return keys
}

func (s *suite) mustGroup(t testing.TB, l lock.GroupLock, keys []string, ttl time.Duration) lock.Group {
	t.Helper()
	g, err := l.TryAcquireAll(ctxFor(t, s.cfg.waitBound), keys, ttl)
	if err != nil {
		t.Fatalf("TryAcquireAll(%q, %v): %v", keys, ttl, err)
	}
	if g == nil {
		t.Fatalf("TryAcquireAll(%q) returned a nil group and no error", keys)
	}
	return g
}

// groupNoPartial: a refused TryAcquireAll holds none of its keys, and a
// granted one holds every key.
func (s *suite) groupNoPartial(t *testing.T) {
	a, b, c := s.newGroup(t), s.newGroup(t), s.newLock(t)
	keys := s.groupKeys(t, 4)
	ttl := s.cfg.longTTL
	held := s.mustAcquire(t, a, keys[2], ttl)
	if g, err := b.TryAcquireAll(ctxFor(t, 10*time.Second), keys, ttl); err == nil {
		_ = g.Release(context.Background())
		t.Fatalf("TryAcquireAll succeeded while %q was held", keys[2])
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll with a held key: want ErrNotAcquired, got %v", err)
	}
	for _, k := range []string{keys[0], keys[1], keys[3]} {
		h, err := c.TryAcquire(ctxFor(t, 10*time.Second), k, ttl)
		if err != nil {
			t.Fatalf("a refused TryAcquireAll left a partial grant: %q is not free: %v", k, err)
		}
		release(t, h, "single key")
	}
	release(t, held, "single key")
	g := s.mustGroup(t, b, keys, ttl)
	if !slices.Equal(g.Keys(), keys) || len(g.Tokens()) != len(keys) {
		t.Fatalf("group Keys %q Tokens %v; want the keys %q in order and one token each", g.Keys(), g.Tokens(), keys)
	}
	for _, k := range keys {
		expectNotAcquired(t, c, k, ttl, "a key of a granted group")
	}
	if err := g.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("group Release: %v", err)
	}
}

// groupContention: all-of grants over overlapping sets and single-key
// grants contend over 4 instances; per-key occupancy counters must never
// exceed one, and each holder's fenced write per key must be admitted.
func (s *suite) groupContention(t *testing.T) {
	keys := s.groupKeys(t, 4)
	sets := [][]string{
		{keys[0], keys[1]}, {keys[1], keys[2]}, {keys[2], keys[3]}, {keys[3], keys[0]},
		{keys[0], keys[1], keys[2], keys[3]}, {keys[3], keys[1]},
	}
	var (
		held     [4]atomic.Int32
		fences   [4]lock.Fence
		overlaps atomic.Int32
		mu       sync.Mutex
		firstErr string
		wg       sync.WaitGroup
	)
	idx := map[string]int{keys[0]: 0, keys[1]: 1, keys[2]: 2, keys[3]: 3}
	fail := func(format string, args ...any) {
		overlaps.Add(1)
		mu.Lock()
		if firstErr == "" {
			firstErr = fmt.Sprintf(format, args...)
		}
		mu.Unlock()
	}
	hold := func(ks []string, tokens []uint64) {
		for _, k := range ks {
			if n := held[idx[k]].Add(1); n != 1 {
				fail("%d holders of %q at once (holding %q)", n, k, ks)
			}
		}
		for range holdYields {
			runtime.Gosched()
		}
		for i, k := range ks {
			if err := fences[idx[k]].Do(tokens[i], nil); err != nil {
				fail("fenced write on %q refused: %v", k, err)
			}
			held[idx[k]].Add(-1)
		}
	}
	// A minute: a backend that leaks partial grants blocks the others
	// until the leaked grants expire, and must fail rather than hang.
	ctx := ctxFor(t, time.Minute)
	errs := make(chan error, 32)
	for i := range 4 {
		l := s.newGroup(t)
		for j := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range s.cfg.rounds {
					if j%4 == 3 { // a single key
						k := keys[(i+j+r)%4]
						h, err := lock.Acquire(ctx, l, k, s.cfg.longTTL)
						if err != nil {
							errs <- fmt.Errorf("Acquire(%q): %w", k, err)
							return
						}
						hold([]string{k}, []uint64{h.Token()})
						if err := h.Release(ctx); err != nil {
							errs <- fmt.Errorf("Release(%q): %w", k, err)
							return
						}
						continue
					}
					set := sets[(i*8+j+r)%len(sets)]
					g, err := lock.AcquireAll(ctx, l, set, s.cfg.longTTL)
					if err != nil {
						errs <- fmt.Errorf("AcquireAll(%q): %w", set, err)
						return
					}
					hold(set, g.Tokens())
					if err := g.Release(ctx); err != nil {
						errs <- fmt.Errorf("group Release(%q): %w", set, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("all-of grant safety violated %d times; first: %s", n, firstErr)
	}
}

// groupConflict: a refused TryAcquireAll names a held key and reports the
// longest remaining ttl among the held keys.
func (s *suite) groupConflict(t *testing.T) {
	a, b := s.newLock(t), s.newGroup(t)
	keys := s.groupKeys(t, 3)
	long, short := s.cfg.longTTL, s.cfg.longTTL/3
	h1 := s.mustAcquire(t, a, keys[1], short)
	h2 := s.mustAcquire(t, a, keys[2], long)
	_, err := b.TryAcquireAll(ctxFor(t, 10*time.Second), keys, s.cfg.ttl)
	var na *lock.NotAcquiredError
	if !errors.As(err, &na) {
		t.Fatalf("TryAcquireAll with held keys: want a *lock.NotAcquiredError, got %v", err)
	}
	if na.Key != keys[1] && na.Key != keys[2] {
		t.Fatalf("NotAcquiredError.Key = %q, want a held key (%q or %q)", na.Key, keys[1], keys[2])
	}
	if na.Remaining <= short || na.Remaining > long {
		t.Fatalf("NotAcquiredError.Remaining = %v, want the longest held key's (about %v; the other has %v)", na.Remaining, long, short)
	}
	release(t, h1, "single key")
	release(t, h2, "single key")
}

// groupTokens: each key of a group has its own token, larger than that
// key's earlier tokens, and the next grant of each key exceeds it.
func (s *suite) groupTokens(t *testing.T) {
	a, b := s.newLock(t), s.newGroup(t)
	keys := s.groupKeys(t, 3)
	order := []string{keys[2], keys[0], keys[1]} // not sorted: Keys keeps the caller's order
	ttl := s.cfg.longTTL
	before := map[string]uint64{}
	for _, k := range keys {
		h := s.mustAcquire(t, a, k, ttl)
		before[k] = h.Token()
		release(t, h, "single key")
	}
	g := s.mustGroup(t, b, order, ttl)
	if !slices.Equal(g.Keys(), order) {
		t.Fatalf("Keys() = %q, want %q (the caller's order)", g.Keys(), order)
	}
	tokens := g.Tokens()
	if len(tokens) != len(order) {
		t.Fatalf("Tokens() = %v, want %d tokens", tokens, len(order))
	}
	for i, k := range order {
		if tokens[i] <= before[k] {
			t.Fatalf("group token of %q is %d, want above that key's earlier %d", k, tokens[i], before[k])
		}
	}
	if err := g.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("group Release: %v", err)
	}
	for i, k := range order {
		h := s.mustAcquire(t, a, k, ttl)
		if h.Token() <= tokens[i] {
			t.Fatalf("token of %q after the group: %d, want above the group's %d", k, h.Token(), tokens[i])
		}
		release(t, h, "single key")
	}
}

// groupExtendRelease: Extend renews every key (ValidUntil from the send
// time); Release frees every key at once; a second Release and an Extend
// after Release return ErrLost and take nothing back.
func (s *suite) groupExtendRelease(t *testing.T) {
	a, c := s.newGroup(t), s.newLock(t)
	keys := s.groupKeys(t, 3)
	ttl := s.cfg.longTTL
	before := time.Now()
	g := s.mustGroup(t, a, keys, ttl)
	checkValidity(t, "group after TryAcquireAll", g.ValidUntil(), before, time.Now(), ttl)
	before = time.Now()
	if err := g.Extend(ctxFor(t, 10*time.Second), ttl); err != nil {
		t.Fatalf("group Extend: %v", err)
	}
	checkValidity(t, "group after Extend", g.ValidUntil(), before, time.Now(), ttl)
	for _, k := range keys {
		expectNotAcquired(t, c, k, ttl, "a key of an extended group")
	}
	if err := g.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("group Release: %v", err)
	}
	expectLost(t, g.Release(ctxFor(t, 10*time.Second)), "second group Release")
	expectLost(t, g.Extend(ctxFor(t, 10*time.Second), ttl), "group Extend after Release")
	for _, k := range keys {
		h, err := c.TryAcquire(ctxFor(t, 10*time.Second), k, ttl)
		if err != nil {
			t.Fatalf("%q after the group's Release (and its Extend after Release): %v", k, err)
		}
		release(t, h, "single key")
	}
}

// groupExpiry: an abandoned group's keys free within ttl + slack, not
// before its ValidUntil; its Extend and Release then return ErrLost and
// leave the successor alone.
func (s *suite) groupExpiry(t *testing.T) {
	a, b, c := s.newGroup(t), s.newLock(t), s.newLock(t)
	keys := s.groupKeys(t, 2)
	g := s.mustGroup(t, a, keys, s.cfg.ttl)
	hb := s.takeOver(t, "group", g, g.Tokens()[1], b, c, keys[1])
	release(t, hb, "successor")
}

// groupOverlappingWaiters: two AcquireAll callers whose sets overlap, both
// blocked behind a third group, both finish, rounds after rounds.
func (s *suite) groupOverlappingWaiters(t *testing.T) {
	a, b, c := s.newGroup(t), s.newGroup(t), s.newGroup(t)
	keys := s.groupKeys(t, 4)
	setB := []string{keys[0], keys[1], keys[2]}
	setC := []string{keys[3], keys[2], keys[1]} // the overlap in the other order
	for round := range 5 {
		blocker := s.mustGroup(t, a, []string{keys[1], keys[2]}, s.cfg.longTTL)
		ctx := ctxFor(t, s.cfg.waitBound)
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for _, w := range []struct {
			l   lock.GroupLock
			set []string
		}{{b, setB}, {c, setC}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := lock.AcquireAll(ctx, w.l, w.set, s.cfg.longTTL)
				if err != nil {
					errs <- fmt.Errorf("AcquireAll(%q): %w", w.set, err)
					return
				}
				runtime.Gosched()
				if err := g.Release(ctx); err != nil {
					errs <- fmt.Errorf("Release(%q): %w", w.set, err)
				}
			}()
		}
		runtime.Gosched()
		if err := blocker.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: overlapping all-of waiters did not both finish within %v: %v", round, s.cfg.waitBound, err)
		}
	}
}

// groupBadInput: duplicate keys, no keys, too many keys, a bad key, a bad
// ttl and a nil context are refused with ErrInvalidArgument.
func (s *suite) groupBadInput(t *testing.T) {
	l := s.newGroup(t)
	keys := s.groupKeys(t, 2)
	ttl := s.cfg.longTTL
	lim := lock.LimitsOf(l)
	most := lim.MaxGroupKeys
	if most <= 0 {
		most = lim.MaxKeys
	}
	tooMany := make([]string, most+1)
	for i := range tooMany {
		tooMany[i] = s.key(t, fmt.Sprintf("{g}/many/%d", i))
	}
	var nilCtx context.Context
	ctx := context.Background()
	try := func(ctx context.Context, keys []string, ttl time.Duration) func() error {
		return func() error {
			g, err := l.TryAcquireAll(ctx, keys, ttl)
			if g != nil {
				_ = g.Release(context.Background())
				if err == nil {
					return errors.New("succeeded and returned a group")
				}
			}
			return err
		}
	}
	for _, c := range []struct {
		name string
		fn   func() error
	}{
		{"duplicate keys", try(ctx, []string{keys[0], keys[1], keys[0]}, ttl)},
		{"no keys", try(ctx, nil, ttl)},
		{"MaxGroupKeys+1 keys", try(ctx, tooMany, ttl)},
		{"an empty key", try(ctx, []string{keys[0], ""}, ttl)},
		{"zero ttl", try(ctx, keys, 0)},
		{"nil context", try(nilCtx, keys, ttl)},
	} {
		err := guarded(t, "TryAcquireAll "+c.name, s.cfg.waitBound, c.fn)
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("TryAcquireAll %s: want an error matching ErrInvalidArgument, got %v", c.name, err)
		}
		if errors.Is(err, lock.ErrUnavailable) {
			t.Errorf("TryAcquireAll %s: %v matches ErrUnavailable, which callers retry forever", c.name, err)
		}
	}
	// The stated maximum is granted, not refused.
	var full lock.Group
	err := guarded(t, "TryAcquireAll of MaxGroupKeys keys", s.cfg.waitBound, func() (err error) {
		full, err = l.TryAcquireAll(ctx, tooMany[:most], ttl)
		return err
	})
	if err != nil {
		t.Errorf("TryAcquireAll of MaxGroupKeys (%d) keys: %v", most, err)
	} else if err := full.Release(ctx); err != nil {
		t.Errorf("Release of a group of MaxGroupKeys keys: %v", err)
	}
	// Nothing above may have taken a key.
	g := s.mustGroup(t, l, keys, ttl)
	if err := g.Release(ctx); err != nil {
		t.Fatalf("group Release: %v", err)
	}
}

// groupInspector, on an Inspector: the grants of one group carry one
// non-empty Group, and another group's differs.
func (s *suite) groupInspector(t *testing.T) {
	skipUnless[lock.Inspector](t, s)
	a := s.newGroup(t)
	in := a.(lock.Inspector)
	keys := s.groupKeys(t, 4)
	g1 := s.mustGroup(t, a, keys[:2], s.cfg.longTTL)
	g2 := s.mustGroup(t, a, keys[2:], s.cfg.longTTL)
	list, err := in.List(ctxFor(t, 30*time.Second), s.key(t, ""))
	if err != nil || len(list) != 4 {
		t.Fatalf("List of two groups of two keys = %+v, %v", list, err)
	}
	byKey := map[string]lock.Grant{}
	for _, g := range list {
		byKey[g.Key] = g
	}
	for i, k := range keys {
		if byKey[k].Token != append(g1.Tokens(), g2.Tokens()...)[i] || byKey[k].Shared {
			t.Fatalf("List entry of %q = %+v, want the group's token", k, byKey[k])
		}
	}
	one, other := byKey[keys[0]].Group, byKey[keys[2]].Group
	if one == "" || one != byKey[keys[1]].Group || other != byKey[keys[3]].Group || one == other {
		t.Fatalf("Group ids %q, %q, %q, %q: want one per group, not empty", one, byKey[keys[1]].Group, other, byKey[keys[3]].Group)
	}
	for _, g := range []lock.Group{g1, g2} {
		if err := g.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("group Release: %v", err)
		}
	}
}
