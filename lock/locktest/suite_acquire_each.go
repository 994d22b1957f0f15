package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// acquireEachRequests is how many requests the checks of RunAcquireEach
// make in one call: more than one chunk of every built-in backend's
// native TryAcquireAnyEach (a test that sets a backend's chunk small
// crosses many chunk boundaries with it).
const acquireEachRequests = 300

// RunAcquireEach checks lock.TryAcquireAnyEach on a backend, natively on a
// lock.AnyEachAcquirer and through the generic path otherwise, as subtests
// of t. Many: 300 requests (WithEachRequests) of 3 keys each (a hash tag of their own per
// request, so that on Redis Cluster they spread over slots) get one result
// each, in order: a free request a grant of one of its keys, with a
// conservative ValidUntil; a request whose keys another instance holds
// ErrNotAcquired with a remaining ttl no longer than theirs, while the
// others are granted; a request with one of its keys held the other key;
// two requests for one key one grant between them; every granted key
// exclusive (a second TryAcquireAnyEach from another instance finds them
// held). BadInput: a request with no keys, an empty key, too many keys, a
// bad ttl fails alone, on the backend's own TryAcquireAnyEach too. Handles:
// the grants extend, release, and are renewed by a lock.Keeper (kept past
// two ttls) like any other.
func RunAcquireEach(t *testing.T, newLock Factory, opts ...Option) {
	c := defaults()
	c.eachRequests = acquireEachRequests
	for _, o := range opts {
		o(&c)
	}
	s := &suite{cfg: c, newLock: newLock, prefix: "locktest/" + randomID() + "/"}
	parallel(t, []subtest{
		{"Many", s.acquireEachMany},
		{"BadInput", s.acquireEachBadInput},
		{"Handles", s.acquireEachHandles},
	})
}

// WithEachRequests sets how many requests the checks of RunAcquireEach
// make in one call (300 by default): fewer for a backend whose grants each
// hold a connection (pglock).
func WithEachRequests(n int) Option { return func(c *config) { c.eachRequests = n } }

// eachKeys are the keys of request i: n keys sharing a hash tag of their
// own.
func (s *suite) eachKeys(t testing.TB, i, n int) []string {
	keys := make([]string, n)
	for j := range keys {
		keys[j] = s.key(t, fmt.Sprintf("{r%d}/%d", i, j))
	}
	return keys
}

func (s *suite) acquireEachMany(t *testing.T) {
	a, b := s.newLock(t), s.newLock(t)
	ttl, held := s.cfg.longTTL, s.cfg.longTTL/2
	ctx := ctxFor(t, 10*s.cfg.waitBound)
	reqs := make([]lock.AnyRequest, s.cfg.eachRequests)
	const (
		free  = iota
		full  // all its keys held by b
		part  // its keys but the last held by b
		pairA // one key, the same as the next request's
		pairB
	)
	kinds := make([]int, len(reqs))
	for i := range reqs {
		reqs[i] = lock.AnyRequest{Keys: s.eachKeys(t, i, 3), TTL: ttl}
		switch {
		case i%5 == 1:
			kinds[i] = full
			for _, k := range reqs[i].Keys {
				s.mustAcquire(t, b, k, held)
			}
		case i%7 == 1:
			kinds[i] = part
			for _, k := range reqs[i].Keys[:2] {
				s.mustAcquire(t, b, k, held)
			}
		case i%9 == 2 && kinds[i-1] == free:
			kinds[i-1], kinds[i] = pairA, pairB
			reqs[i-1].Keys = reqs[i-1].Keys[:1]
			reqs[i].Keys = reqs[i-1].Keys
		}
	}
	before := time.Now()
	res := lock.TryAcquireAnyEach(ctx, a, reqs)
	after := time.Now()
	if len(res) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(res), len(reqs))
	}
	var granted []lock.AnyRequest
	for i, r := range res {
		switch kinds[i] {
		case full:
			if !errors.Is(r.Err, lock.ErrNotAcquired) {
				t.Fatalf("request %d, every key held: %v, want ErrNotAcquired", i, r.Err)
			}
			if rem := lock.RemainingTTL(r.Err); rem > held {
				t.Fatalf("request %d: remaining ttl %v, above the holder's %v", i, rem, held)
			}
			continue
		case pairB:
			if (r.Err == nil) == (res[i-1].Err == nil) {
				t.Fatalf("requests %d and %d for one key: %v and %v, want one grant", i-1, i, res[i-1].Err, r.Err)
			}
			if err := cmpErr(r.Err, res[i-1].Err); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("requests %d and %d for one key: the refusal is %v, want ErrNotAcquired", i-1, i, err)
			}
			if r.Err != nil {
				continue
			}
		case pairA:
			if r.Err != nil {
				continue // the next one has the grant
			}
		}
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
		k := r.Handle.Key()
		if kinds[i] == part && k != reqs[i].Keys[2] {
			t.Fatalf("request %d granted %q, its one free key is %q", i, k, reqs[i].Keys[2])
		}
		if !containsString(reqs[i].Keys, k) {
			t.Fatalf("request %d granted %q, not one of its keys %q", i, k, reqs[i].Keys)
		}
		checkValidity(t, fmt.Sprintf("request %d's grant", i), r.Handle.ValidUntil(), before, after, ttl)
		granted = append(granted, lock.AnyRequest{Keys: []string{k}, TTL: ttl})
	}
	for i, r := range lock.TryAcquireAnyEach(ctx, b, granted) {
		if !errors.Is(r.Err, lock.ErrNotAcquired) {
			t.Fatalf("%q, granted by the first call, again from another instance: %v, want ErrNotAcquired", granted[i].Keys[0], r.Err)
		}
	}
	for i, r := range res {
		if r.Err == nil {
			if err := r.Handle.Release(ctx); err != nil {
				t.Fatalf("Release of request %d's grant: %v", i, err)
			}
		}
	}
}

// cmpErr is the one of a and b that is not nil.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *suite) acquireEachBadInput(t *testing.T) {
	l := s.newLock(t)
	lim := lock.LimitsOf(l)
	ttl := s.cfg.longTTL
	tooMany := make([]string, lim.MaxKeys+1)
	for i := range tooMany {
		tooMany[i] = s.key(t, fmt.Sprintf("{many}/%d", i))
	}
	reqs := []lock.AnyRequest{
		{Keys: s.eachKeys(t, 0, 2), TTL: ttl},
		{Keys: nil, TTL: ttl},
		{Keys: []string{s.key(t, "{r1}/0"), ""}, TTL: ttl},
		{Keys: tooMany, TTL: ttl},
		{Keys: s.eachKeys(t, 4, 2), TTL: 0},
		{Keys: s.eachKeys(t, 5, 2), TTL: lim.MaxTTL + time.Millisecond},
		{Keys: s.eachKeys(t, 6, 2), TTL: ttl},
	}
	want := []error{nil, lock.ErrInvalidKey, lock.ErrInvalidKey, lock.ErrInvalidKey, lock.ErrInvalidTTL, lock.ErrInvalidTTL, nil}
	calls := []struct {
		name string
		fn   func(context.Context, []lock.AnyRequest) []lock.AnyResult
	}{{"lock.TryAcquireAnyEach", func(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
		return lock.TryAcquireAnyEach(ctx, l, reqs)
	}}}
	if a, ok := l.(lock.AnyEachAcquirer); ok {
		calls = append(calls, struct {
			name string
			fn   func(context.Context, []lock.AnyRequest) []lock.AnyResult
		}{fmt.Sprintf("%T.TryAcquireAnyEach", l), a.TryAcquireAnyEach})
	}
	for _, c := range calls {
		res := c.fn(ctxFor(t, s.cfg.waitBound), reqs)
		if len(res) != len(reqs) {
			t.Fatalf("%s: %d results for %d requests", c.name, len(res), len(reqs))
		}
		for i, r := range res {
			if want[i] == nil {
				if r.Err != nil {
					t.Fatalf("%s: valid request %d beside bad ones: %v", c.name, i, r.Err)
				}
				if err := r.Handle.Release(ctxFor(t, s.cfg.waitBound)); err != nil {
					t.Fatalf("%s: Release: %v", c.name, err)
				}
				continue
			}
			if !errors.Is(r.Err, want[i]) || errors.Is(r.Err, lock.ErrUnavailable) || r.Handle != nil {
				t.Fatalf("%s: bad request %d: %v, want %v", c.name, i, r.Err, want[i])
			}
		}
		// A bad request took nothing: its valid keys are free.
		h := s.mustAcquire(t, l, reqs[2].Keys[0], ttl)
		_ = h.Release(ctxFor(t, s.cfg.waitBound))
	}
	var nilCtx context.Context
	for _, r := range lock.TryAcquireAnyEach(nilCtx, l, reqs[:1]) {
		if !errors.Is(r.Err, lock.ErrInvalidArgument) {
			t.Fatalf("nil context: %v, want ErrInvalidArgument", r.Err)
		}
	}
}

func (s *suite) acquireEachHandles(t *testing.T) {
	l, other := s.newLock(t), s.newLock(t)
	ttl := max(s.cfg.minTTL, 2*time.Second)
	ctx := ctxFor(t, 10*s.cfg.waitBound)
	reqs := make([]lock.AnyRequest, min(20, s.cfg.eachRequests))
	for i := range reqs {
		reqs[i] = lock.AnyRequest{Keys: s.eachKeys(t, i, 2), TTL: ttl}
	}
	res := lock.TryAcquireAnyEach(ctx, l, reqs)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
	}
	if err := res[0].Handle.Extend(ctx, s.cfg.longTTL); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := res[1].Handle.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := res[1].Handle.Extend(ctx, ttl); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend after Release: %v, want ErrLost", err)
	}
	h := s.mustAcquire(t, other, res[1].Handle.Key(), ttl)
	_ = h.Release(ctx)
	k, err := lock.NewKeeper(l, ttl)
	if err != nil {
		t.Fatalf("NewKeeper: %v", err)
	}
	defer k.Close(context.Background())
	var leases []*lock.Lease
	for i, r := range res[2:] {
		le, err := k.Keep(ctx, r.Handle)
		if err != nil {
			t.Fatalf("Keeper.Keep of request %d's grant: %v", i+2, err)
		}
		leases = append(leases, le)
	}
	time.Sleep(2*ttl + ttl/2) // past two ttls, only the Keeper's renewals hold them
	for i, le := range leases {
		if le.Err() != nil {
			t.Fatalf("kept grant %d lost while renewals succeed: %v", i+2, le.Err())
		}
	}
	expectNotAcquired(t, other, leases[0].Handle().Key(), ttl, "a kept grant past two ttls")
	if err := k.Close(ctx); err != nil {
		t.Fatalf("Keeper.Close: %v", err)
	}
	h = s.mustAcquire(t, other, leases[len(leases)-1].Handle().Key(), ttl)
	_ = h.Release(ctx)
	_ = res[0].Handle.Release(ctx)
}
