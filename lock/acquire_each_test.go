package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// multiOnly is memlock with TryAcquireAny and nothing of TryAcquireAnyEach:
// the generic path through lock.MultiLock.
type multiOnly struct{ *memlock.Lock }

func (m multiOnly) TryAcquireAnyEach() {} // hides memlock's, if it has one

// slowLock is a Lock (no MultiLock) whose TryAcquire takes a millisecond
// of (synctest) time and counts the calls in flight.
type slowLock struct {
	lock.Lock
	now, most atomic.Int32
}

func (s *slowLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(time.Millisecond)
	return s.Lock.TryAcquire(ctx, key, ttl)
}

// The generic path, on a MultiLock and on a plain Lock: results in order,
// each granted key exclusive, a request whose keys are all held refused
// alone with the shortest remaining ttl, bad input refused alone.
func TestTryAcquireAnyEachGeneric(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*memlock.Lock) lock.Lock
	}{
		{"MultiLock", func(m *memlock.Lock) lock.Lock { return multiOnly{m} }},
		{"Lock", func(m *memlock.Lock) lock.Lock { return soloLock{m} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testkit.Must(memlock.New())
			l := tc.wrap(m)
			if _, native := l.(lock.AnyEachAcquirer); native {
				t.Fatal("the wrapper is an AnyEachAcquirer")
			}
			ctx := t.Context()
			testkit.Must(m.TryAcquire(ctx, "full/0", time.Minute))
			testkit.Must(m.TryAcquire(ctx, "full/1", 10*time.Second))
			reqs := []lock.AnyRequest{
				{Keys: []string{"a/0", "a/1", "a/2"}, TTL: time.Minute},
				{Keys: []string{"full/0", "full/1"}, TTL: time.Minute},
				{Keys: []string{"b/0", ""}, TTL: time.Minute},
				{Keys: []string{"c/0"}, TTL: 0},
				{Keys: []string{"a/0", "a/1", "a/2"}, TTL: time.Minute},
				{Keys: []string{"d/0"}, TTL: time.Minute},
			}
			res := lock.TryAcquireAnyEach(ctx, l, reqs)
			if len(res) != len(reqs) {
				t.Fatalf("%d results for %d requests", len(res), len(reqs))
			}
			for _, i := range []int{0, 4, 5} {
				if res[i].Err != nil || !containsKey(reqs[i].Keys, res[i].Handle.Key()) {
					t.Fatalf("request %d: %+v, want a grant of one of %q", i, res[i], reqs[i].Keys)
				}
			}
			if res[0].Handle.Key() == res[4].Handle.Key() {
				t.Fatalf("requests 0 and 4 were both granted %q", res[0].Handle.Key())
			}
			if !errors.Is(res[1].Err, lock.ErrNotAcquired) {
				t.Fatalf("request 1, every key held: %v, want ErrNotAcquired", res[1].Err)
			}
			if r := lock.RemainingTTL(res[1].Err); r <= 0 || r > 10*time.Second {
				t.Fatalf("request 1: remaining %v, want the shortest, at most 10s", r)
			}
			if !errors.Is(res[2].Err, lock.ErrInvalidKey) || !errors.Is(res[3].Err, lock.ErrInvalidTTL) {
				t.Fatalf("bad requests: %v, %v; want ErrInvalidKey, ErrInvalidTTL", res[2].Err, res[3].Err)
			}
			if _, err := m.TryAcquire(ctx, "b/0", time.Minute); err != nil {
				t.Fatalf("the bad request's valid key was taken: %v", err)
			}
			again := lock.TryAcquireAnyEach(ctx, l, []lock.AnyRequest{{Keys: []string{res[5].Handle.Key()}, TTL: time.Minute}})
			if !errors.Is(again[0].Err, lock.ErrNotAcquired) {
				t.Fatalf("a granted key again: %v, want ErrNotAcquired", again[0].Err)
			}
			for _, i := range []int{0, 4, 5} {
				if err := res[i].Handle.Extend(ctx, time.Minute); err != nil {
					t.Fatalf("Extend of grant %d: %v", i, err)
				}
				if err := res[i].Handle.Release(ctx); err != nil {
					t.Fatalf("Release of grant %d: %v", i, err)
				}
			}
		})
	}
}

func containsKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func TestTryAcquireAnyEachInput(t *testing.T) {
	m := testkit.Must(memlock.New())
	reqs := []lock.AnyRequest{{Keys: []string{"k"}, TTL: time.Minute}}
	if res := lock.TryAcquireAnyEach(t.Context(), nil, reqs); !errors.Is(res[0].Err, lock.ErrInvalidArgument) {
		t.Fatalf("nil Lock: %v", res[0].Err)
	}
	//lint:ignore SA1012 the nil context is the input under test
	if res := lock.TryAcquireAnyEach(nil, m, reqs); !errors.Is(res[0].Err, lock.ErrInvalidArgument) {
		t.Fatalf("nil context: %v", res[0].Err)
	}
	if res := lock.TryAcquireAnyEach(t.Context(), m, nil); len(res) != 0 {
		t.Fatalf("no requests: %v", res)
	}
	tooMany := make([]string, lock.MaxKeys+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint("k/", i)
	}
	res := lock.TryAcquireAnyEach(t.Context(), soloLock{m}, []lock.AnyRequest{{Keys: tooMany, TTL: time.Minute}, reqs[0]})
	if !errors.Is(res[0].Err, lock.ErrInvalidKey) || res[1].Err != nil {
		t.Fatalf("too many keys: %v, %v", res[0].Err, res[1].Err)
	}
	if !strings.Contains(res[0].Err.Error(), "maximum") {
		t.Fatalf("too many keys: %v", res[0].Err)
	}
}

// The generic path makes at most 16 requests at once, and that many.
func TestTryAcquireAnyEachGenericParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &slowLock{Lock: testkit.Must(memlock.New())}
		reqs := make([]lock.AnyRequest, 100)
		for i := range reqs {
			reqs[i] = lock.AnyRequest{Keys: []string{fmt.Sprint("p/", i)}, TTL: time.Minute}
		}
		start := time.Now()
		for i, r := range lock.TryAcquireAnyEach(t.Context(), s, reqs) {
			if r.Err != nil || r.Handle.Key() != reqs[i].Keys[0] {
				t.Fatalf("request %d: %+v", i, r)
			}
		}
		if got := s.most.Load(); got != 16 {
			t.Fatalf("%d requests in flight at most, want 16", got)
		}
		if d := time.Since(start); d != 7*time.Millisecond {
			t.Fatalf("100 requests of 1ms took %v, want 7ms (16 at once)", d)
		}
	})
}
