package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// Sizes and slot numbers read back from a backend are untrusted: keys that
// any client can write under a semaphore's prefix, with numbers New could
// never have made, are ignored by Observe, ObserveAll, Occupancy and the
// size check. A size marker of 3,000,000,000 made Observation.Size()
// report it, and Slots(Size()) allocate for that many slots (out of memory).
func TestUntrustedKeys(t *testing.T) {
	backends.Each(t, []func(testing.TB) backends.Backend{backends.Memlock, backends.Redis}, func(t *testing.T, b backends.Backend) {
		name := uniqueName(t)
		l, watcher := b.New(t), b.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, suffix := range []string{"size/3000000000", "slot/3000000000", "size/99999999999999999999",
			fmt.Sprintf("slot/%d", semaphore.MaxSize), fmt.Sprintf("size/%d", semaphore.MaxSize+1),
			"size/0", "size/-5", "slot/-1", "size/+5", "slot/007", "slot/1e9"} {
			if _, err := l.TryAcquire(ctx, "sem/{"+name+"}/"+suffix, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		sem := newSem(t, l, name, 3)
		p, err := sem.TryAcquire(ctx, time.Minute) // declares size 3
		if err != nil {
			t.Fatalf("TryAcquire beside forged keys: %v", err)
		}
		defer p.Release(context.Background())
		o, err := semaphore.Observe(ctx, watcher, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := o.Size(); n != 3 {
			t.Fatalf("observed size %d (sizes %v, held %d), want 3: forged keys count", n, o.Sizes, len(o.Held))
		}
		if len(o.Sizes) != 1 || len(o.Held) != 1 || o.Held[0].Slot != p.Slot() || o.Ignored != 11 {
			t.Fatalf("observed %+v, want size 3, slot %d held and the 11 forged keys ignored", o, p.Slot())
		}
		if slots := o.Slots(o.Size()); len(slots) != 3 {
			t.Fatalf("Slots(%d) has %d entries", o.Size(), len(slots))
		}
		all, err := semaphore.ObserveAll(ctx, watcher, name)
		if err != nil || len(all) != 1 || all[0].Size() != 3 {
			t.Fatalf("ObserveAll = %+v, %v", all, err)
		}
		occ, err := sem.Occupancy(ctx)
		if err != nil || len(occ) != 3 {
			t.Fatalf("Occupancy = %d slots, %v; want 3, no error", len(occ), err)
		}
	})
}

// Observation.Slots bounds the size it is given.
func TestSlotsBounds(t *testing.T) {
	var o semaphore.Observation
	if n := len(o.Slots(-1)); n != 0 {
		t.Errorf("Slots(-1): %d slots", n)
	}
	if n := len(o.Slots(3_000_000_000)); n != semaphore.MaxSize {
		t.Errorf("Slots(3e9): %d slots, want MaxSize", n)
	}
}

// Names follow backendkit.CheckName (up to lock.MaxNameLen bytes: every key the
// semaphore makes still fits in lock.MaxKeyLen); sizes outside [1, MaxSize]
// are refused with an error that names them.
func TestNamesAndSizes(t *testing.T) {
	l := testkit.Must(memlock.New())
	long := strings.Repeat("n", lock.MaxNameLen)
	sem, err := semaphore.New(l, long, semaphore.MaxSize)
	if err != nil {
		t.Fatalf("New with a name of MaxNameLen bytes: %v", err)
	}
	if k := semaphore.SlotKey(long, semaphore.MaxSize-1); len(k) > lock.MaxKeyLen {
		t.Fatalf("slot key of %d bytes", len(k))
	}
	p, err := sem.TryAcquire(t.Context(), time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire on a semaphore with the longest name: %v", err)
	}
	_ = p.Release(t.Context())
	for _, name := range []string{long + "n", "a\nb", "a\x00b", "\xff", "a{b", ""} {
		_, err := semaphore.New(l, name, 1)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "semaphore name") {
			t.Errorf("New(%.20q): %v, want ErrInvalidArgument naming the semaphore name", name, err)
		}
	}
	for _, size := range []int{0, -5, semaphore.MaxSize + 1, 3_000_000_000} {
		_, err := semaphore.New(l, "x", size)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprint(size)) {
			t.Errorf("New(size %d): %v, want ErrInvalidArgument naming the size", size, err)
		}
	}
}

// fewKeys is memlock stating (and enforcing) a MaxKeys below a semaphore's
// size, as a third-party backend may.
type fewKeys struct{ *memlock.Lock }

const fewKeysMax = 4

func (f fewKeys) Limits() lock.Limits {
	lim := lock.DefaultLimits
	lim.MaxKeys = fewKeysMax
	return lim
}

func (f fewKeys) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.ValidateKeys(ctx, keys, ttl, f.Limits()); err != nil {
		return nil, err
	}
	return f.Lock.TryAcquireAny(ctx, keys, ttl)
}

func (f fewKeys) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	if err := backendkit.ValidateSubscribe(ctx, keys, f.Limits()); err != nil {
		return nil, err
	}
	return f.Lock.Subscribe(ctx, keys...)
}

// A semaphore larger than its backend's MaxKeys splits its slots over
// several TryAcquireAny calls, and Acquire waits without one subscription
// for all of them.
func TestSizeAboveMaxKeys(t *testing.T) {
	l := fewKeys{testkit.Must(memlock.New())}
	const size = 3*fewKeysMax - 1
	sem := newSem(t, l, uniqueName(t), size)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[int]bool{}
	var ps []*semaphore.Permit
	for range size {
		p, err := sem.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire with %d of %d slots held: %v", len(ps), size, err)
		}
		if seen[p.Slot()] {
			t.Fatalf("slot %d granted twice", p.Slot())
		}
		seen[p.Slot()] = true
		ps = append(ps, p)
	}
	if _, err := sem.TryAcquire(ctx, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire with every slot held: %v, want ErrNotAcquired", err)
	}
	if err := ps[size/2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := sem.Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatalf("Acquire with one slot free: %v", err)
	}
	_ = p.Release(ctx)
	for i, p := range ps {
		if i != size/2 {
			_ = p.Release(ctx)
		}
	}
}

// A ttl above the backend's maximum is refused at once by TryAcquire,
// Acquire and Do (WithTTL), on every backend: it used to reach
// TryAcquireAny, where Redis answered ErrUnavailable and Acquire retried it
// until its context ended.
func TestHugeTTL(t *testing.T) {
	backends.Each(t, backends.All(t), func(t *testing.T, b backends.Backend) {
		l := b.New(t)
		sem := newSem(t, l, uniqueName(t), 2)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, ttl := range []time.Duration{lock.LimitsOf(l).MaxTTL + 1, math.MaxInt64} {
			if _, err := sem.TryAcquire(ctx, ttl); !errors.Is(err, lock.ErrInvalidTTL) {
				t.Errorf("TryAcquire(%v): %v, want ErrInvalidTTL", ttl, err)
			}
			if _, err := sem.Acquire(ctx, ttl); !errors.Is(err, lock.ErrInvalidTTL) {
				t.Errorf("Acquire(%v): %v, want ErrInvalidTTL", ttl, err)
			}
			if s, err := semaphore.New(l, uniqueName(t), 2, semaphore.WithTTL(ttl)); err == nil {
				if err := s.Do(ctx, func(context.Context) error { return nil }); !errors.Is(err, lock.ErrInvalidTTL) {
					t.Errorf("Do with WithTTL(%v): %v, want ErrInvalidTTL", ttl, err)
				}
			} else if !errors.Is(err, lock.ErrInvalidTTL) {
				t.Errorf("New with WithTTL(%v): %v, want ErrInvalidTTL", ttl, err)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the refusals took until the context ended")
		}
	})
}

// Observe takes only names New would: an empty or otherwise invalid name
// is ErrInvalidArgument (it was an empty observation, so a tool reported
// nothing for a name that cannot exist); a nil context too.
func TestObserveChecksItsInput(t *testing.T) {
	l := testkit.Must(memlock.New())
	for _, name := range []string{"", "a{b", "a\nb", strings.Repeat("n", lock.MaxNameLen+1)} {
		if _, err := semaphore.Observe(t.Context(), l, name); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("Observe(%.20q): %v, want ErrInvalidArgument", name, err)
		}
	}
	var nilCtx context.Context
	if _, err := semaphore.Observe(nilCtx, l, "x"); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Observe(nil ctx): %v", err)
	}
	if _, err := semaphore.ObserveAll(nilCtx, l, ""); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("ObserveAll(nil ctx): %v", err)
	}
	if _, err := semaphore.Observe(t.Context(), l, "x"); err != nil {
		t.Errorf("Observe of a valid name: %v", err)
	}
}

// A permit states its backend's limits: lock.Keep refuses a ttl below
// redislock's minimum on it (the renewals would all be refused), as on a
// plain handle.
func TestPermitLimits(t *testing.T) {
	b := backends.Redis(t)
	sem := newSem(t, b.New(t), uniqueName(t), 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(context.Background())
	lease, err := lock.Keep(ctx, p, time.Millisecond)
	if !errors.Is(err, lock.ErrInvalidTTL) {
		if lease != nil {
			_ = lease.Release(ctx)
		}
		t.Fatalf("Keep(permit, 1ms) on Redis: %v, want ErrInvalidTTL", err)
	}
}
