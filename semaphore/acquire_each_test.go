package semaphore_test

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
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/metrictest"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// TryAcquireEach on every backend: one permit per request, in order, on
// distinct slots; a full semaphore refused alone; a bad request refused
// alone; a size mismatch found as TryAcquire finds it; the permits are
// ordinary (Release, then the slot is free again).
func TestTryAcquireEach(t *testing.T) {
	backends.Each(t, backends.All(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		l := b.New(t)
		ctx := t.Context()
		two := newSem(t, l, uniqueName(t), 2)
		one := newSem(t, l, uniqueName(t), 1)
		held := newSem(t, l, uniqueName(t), 1)
		name := uniqueName(t)
		newSem(t, l, name, 3).TryAcquire(ctx, time.Minute) // declares size 3
		mismatched := newSem(t, l, name, 5)
		p, err := held.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
		reqs := []semaphore.SlotRequest{
			{Sem: two, TTL: time.Minute},
			{Sem: held, TTL: time.Minute},
			{Sem: nil, TTL: time.Minute},
			{Sem: two, TTL: time.Minute},
			{Sem: one, TTL: 0},
			{Sem: one, TTL: time.Minute},
			{Sem: mismatched, TTL: time.Minute},
		}
		res := semaphore.TryAcquireEach(ctx, reqs)
		if len(res) != len(reqs) {
			t.Fatalf("%d results for %d requests", len(res), len(reqs))
		}
		for _, i := range []int{0, 3, 5} {
			if res[i].Err != nil || res[i].Permit == nil {
				t.Fatalf("request %d: %v", i, res[i].Err)
			}
		}
		if res[0].Permit.Slot() == res[3].Permit.Slot() {
			t.Fatalf("two permits on slot %d", res[0].Permit.Slot())
		}
		if !errors.Is(res[1].Err, lock.ErrNotAcquired) {
			t.Fatalf("full semaphore: %v, want ErrNotAcquired", res[1].Err)
		}
		if !errors.Is(res[2].Err, lock.ErrInvalidArgument) || !errors.Is(res[4].Err, lock.ErrInvalidTTL) {
			t.Fatalf("bad requests: %v, %v", res[2].Err, res[4].Err)
		}
		if !errors.Is(res[6].Err, semaphore.ErrSizeMismatch) {
			t.Fatalf("size 5 after size 3: %v, want ErrSizeMismatch", res[6].Err)
		}
		if _, err := one.TryAcquire(ctx, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("the slot TryAcquireEach granted: %v, want ErrNotAcquired", err)
		}
		for _, i := range []int{0, 3, 5} {
			if err := res[i].Permit.Release(ctx); err != nil {
				t.Fatalf("Release of permit %d: %v", i, err)
			}
		}
		again := semaphore.TryAcquireEach(ctx, reqs[5:6])
		if again[0].Err != nil {
			t.Fatalf("after the release: %v", again[0].Err)
		}
		_ = again[0].Permit.Release(ctx)
	})
}

// Semaphores of two Locks: an error in every result, nothing taken.
func TestTryAcquireEachOneLock(t *testing.T) {
	a := newSem(t, testkit.Must(memlock.New()), "a", 1)
	b := newSem(t, testkit.Must(memlock.New()), "b", 1)
	res := semaphore.TryAcquireEach(t.Context(), []semaphore.SlotRequest{{Sem: a, TTL: time.Minute}, {Sem: b, TTL: time.Minute}})
	for i, r := range res {
		if !errors.Is(r.Err, lock.ErrInvalidArgument) {
			t.Fatalf("result %d: %v, want ErrInvalidArgument", i, r.Err)
		}
	}
	if p, err := a.TryAcquire(t.Context(), time.Minute); err != nil {
		t.Fatalf("a's slot was taken: %v", err)
	} else {
		_ = p.Release(t.Context())
	}
	res = semaphore.TryAcquireEach(t.Context(), []semaphore.SlotRequest{{TTL: time.Minute}})
	if !errors.Is(res[0].Err, lock.ErrInvalidArgument) {
		t.Fatalf("no semaphore: %v", res[0].Err)
	}
}

// Semaphores over a Lock of a comparable type that holds a value that is
// not (a struct whose interface field holds a map) are not known to be of
// one Lock: TryAcquireEach says so in every result, as for two Locks.
// It checked only that the type was comparable, and == on the two Locks
// panicked.
func TestTryAcquireEachOverALockOfAnUncomparableValue(t *testing.T) {
	l := wrappedLock{taggedLock{testkit.Must(memlock.New()), map[string]string{}}}
	a, b := newSem(t, l, "a", 1), newSem(t, l, "b", 1)
	res := semaphore.TryAcquireEach(t.Context(), []semaphore.SlotRequest{{Sem: a, TTL: time.Minute}, {Sem: b, TTL: time.Minute}})
	for i, r := range res {
		if !errors.Is(r.Err, lock.ErrInvalidArgument) || !strings.Contains(r.Err.Error(), "not all of one Lock") {
			t.Errorf("result %d: %v, want ErrInvalidArgument: not all of one Lock", i, r.Err)
		}
	}
}

// taggedLock is a Lock of a type that is not comparable (it holds a map).
type taggedLock struct {
	*memlock.Lock
	tags map[string]string
}

// wrappedLock is a Lock of a comparable type, which may hold one.
type wrappedLock struct{ lock.Lock }

// A semaphore larger than the backend's MaxKeys takes TryAcquire's path
// beside the others.
func TestTryAcquireEachAboveMaxKeys(t *testing.T) {
	l := fewKeys{testkit.Must(memlock.New())}
	big := newSem(t, l, uniqueName(t), 3*fewKeysMax)
	small := newSem(t, l, uniqueName(t), 2)
	seen := map[int]bool{}
	for range 3 * fewKeysMax {
		res := semaphore.TryAcquireEach(t.Context(), []semaphore.SlotRequest{{Sem: big, TTL: time.Minute}, {Sem: small, TTL: time.Minute}})
		if res[0].Err != nil || seen[res[0].Permit.Slot()] {
			t.Fatalf("with %d slots held: %+v", len(seen), res[0])
		}
		seen[res[0].Permit.Slot()] = true
	}
	res := semaphore.TryAcquireEach(t.Context(), []semaphore.SlotRequest{{Sem: big, TTL: time.Minute}})
	if !errors.Is(res[0].Err, lock.ErrNotAcquired) {
		t.Fatalf("every slot held: %v", res[0].Err)
	}
}

// TryAcquireEach counts permits and rejections as TryAcquire does.
func TestTryAcquireEachMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := metrictest.New()
		l := testkit.Must(memlock.New())
		sem, err := semaphore.New(l, "m", 2, semaphore.WithCommon(lock.Common{MeterProvider: mp}))
		if err != nil {
			t.Fatal(err)
		}
		req := semaphore.SlotRequest{Sem: sem, TTL: time.Minute}
		res := semaphore.TryAcquireEach(t.Context(), []semaphore.SlotRequest{req, req, req})
		var granted []*semaphore.Permit
		for _, r := range res {
			if r.Err == nil {
				granted = append(granted, r.Permit)
			} else if !errors.Is(r.Err, lock.ErrNotAcquired) {
				t.Fatal(r.Err)
			}
		}
		if len(granted) != 2 {
			t.Fatalf("three of two: %+v", res)
		}
		got := metrictest.Collect(t, reader)
		const (
			held       = "leasehold.semaphore.permits.held{leasehold.semaphore=m}"
			rejections = "leasehold.semaphore.rejections{leasehold.semaphore=m}"
		)
		if got[held].Value != 2 || got[rejections].Value != 1 {
			t.Fatalf("held %+v, rejections %+v; want 2, 1", got[held], got[rejections])
		}
		_ = granted[0].Release(t.Context())
		if got := metrictest.Collect(t, reader); got[held].Value != 1 {
			t.Fatalf("held after a release: %+v", got[held])
		}
	})
}

// countingEach is memlock counting the calls that reach it: TryAcquireEach
// of semaphores made WithoutSizeCheck is one TryAcquireAnyEach and nothing
// else, whatever their number.
type countingEach struct {
	*memlock.Lock
	each, other atomic.Int32
}

func (c *countingEach) TryAcquireAnyEach(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
	c.each.Add(1)
	return c.Lock.TryAcquireAnyEach(ctx, reqs)
}

func (c *countingEach) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	c.other.Add(1)
	return c.Lock.TryAcquire(ctx, key, ttl)
}

func (c *countingEach) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	c.other.Add(1)
	return c.Lock.TryAcquireAny(ctx, keys, ttl)
}

func (c *countingEach) List(ctx context.Context, prefix string) ([]lock.Grant, error) {
	c.other.Add(1)
	return c.Lock.List(ctx, prefix)
}

func TestTryAcquireEachIsOneCall(t *testing.T) {
	l := &countingEach{Lock: testkit.Must(memlock.New())}
	reqs := make([]semaphore.SlotRequest, 500)
	for i := range reqs {
		s, err := semaphore.New(l, fmt.Sprint("timer-", i), 1+i%16, semaphore.WithoutSizeCheck())
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = semaphore.SlotRequest{Sem: s, TTL: time.Minute}
	}
	for round := range 2 { // the second finds the 1-slot semaphores full
		for i, r := range semaphore.TryAcquireEach(t.Context(), reqs) {
			full := round == 1 && i%16 == 0
			if (r.Err != nil) != full || (full && !errors.Is(r.Err, lock.ErrNotAcquired)) {
				t.Fatalf("round %d, semaphore %d: %v", round, i, r.Err)
			}
		}
	}
	if e, o := l.each.Load(), l.other.Load(); e != 2 || o != 0 {
		t.Fatalf("two TryAcquireEach of 500 semaphores: %d TryAcquireAnyEach and %d other calls, want 2 and 0", e, o)
	}
}
