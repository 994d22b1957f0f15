package semaphore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

func TestMain(m *testing.M) {
	childMain()
	testenv.Main(m)
}

func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:])
}

func newSem(t testing.TB, l lock.Lock, name string, size int) *semaphore.Semaphore {
	t.Helper()
	s, err := semaphore.New(l, name, size)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSuite runs the shared semaphore suite on every backend.
func TestSuite(t *testing.T) {
	backends.Each(t, backends.All(t), func(t *testing.T, b backends.Backend) {
		t.Run("Cap", func(t *testing.T) { t.Parallel(); testCap(t, b) })
		t.Run("TryAcquire", func(t *testing.T) { t.Parallel(); testTryAcquire(t, b) })
		t.Run("AcquireWakesOnAnySlot", func(t *testing.T) { t.Parallel(); testWakes(t, b) })
		t.Run("CrashedHolderFrees", func(t *testing.T) { t.Parallel(); testCrash(t, b) })
		t.Run("SizeMismatch", func(t *testing.T) { t.Parallel(); testSizeMismatch(t, b) })
		t.Run("Occupancy", func(t *testing.T) { t.Parallel(); testOccupancy(t, b) })
		t.Run("Observe", func(t *testing.T) { t.Parallel(); testObserve(t, b) })
		t.Run("DoAndKeep", func(t *testing.T) { t.Parallel(); testDo(t, b) })
		t.Run("AcquireKeepsTheSlot", func(t *testing.T) {
			t.Parallel()
			ttl := max(time.Second, lock.LimitsOf(b.New(t)).MinTTL)
			testAcquireKeeps(t, b.New, ttl)
		})
		t.Run("WithoutMultiLock", func(t *testing.T) { t.Parallel(); testWithoutMultiLock(t, b) })
	})
}

// testCap: 12 goroutines over 3 instances, size 3: never more than 3
// permits at once, per-slot tokens only grow, every slot in range.
func testCap(t *testing.T, b backends.Backend) {
	const size, instances, perInstance, rounds = 3, 3, 4, 8
	name := uniqueName(t)
	var (
		mu      sync.Mutex
		fences  [size]lock.Fence
		holding [size]bool
		inUse   atomic.Int32
		peak    atomic.Int32
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range instances {
		sem := newSem(t, b.New(t), name, size)
		for range perInstance {
			wg.Go(func() {
				for range rounds {
					p, err := sem.Acquire(ctx, 30*time.Second)
					if err != nil {
						t.Error(err)
						return
					}
					n := inUse.Add(1)
					for {
						old := peak.Load()
						if n <= old || peak.CompareAndSwap(old, n) {
							break
						}
					}
					mu.Lock()
					if holding[p.Slot()] {
						t.Errorf("slot %d granted twice", p.Slot())
					}
					holding[p.Slot()] = true
					if err := fences[p.Slot()].Do(p.Token(), nil); err != nil {
						t.Errorf("slot %d: %v", p.Slot(), err)
					}
					mu.Unlock()
					time.Sleep(time.Millisecond) // work
					mu.Lock()
					holding[p.Slot()] = false
					mu.Unlock()
					inUse.Add(-1)
					if err := p.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if p := peak.Load(); p > size {
		t.Fatalf("%d permits at once, size %d", p, size)
	}
	if p := peak.Load(); p < 2 {
		t.Logf("peak occupancy only %d: little contention", p)
	}
}

func testTryAcquire(t *testing.T, b backends.Backend) {
	name := uniqueName(t)
	s1, s2 := newSem(t, b.New(t), name, 2), newSem(t, b.New(t), name, 2)
	ctx := t.Context()
	p1, err := s1.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s2.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Slot() == p2.Slot() {
		t.Fatalf("two permits on slot %d", p1.Slot())
	}
	if _, err := s2.TryAcquire(ctx, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("third permit of two: %v", err)
	}
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p3, err := s2.TryAcquire(ctx, time.Minute)
	if err != nil || p3.Slot() != p1.Slot() {
		t.Fatalf("after a release: %v, %v", p3, err)
	}
	if p3.Token() <= p1.Token() {
		t.Fatalf("slot %d token %d after %d", p3.Slot(), p3.Token(), p1.Token())
	}
	_ = p2.Release(ctx)
	_ = p3.Release(ctx)
}

// testWakes: a waiter whose attempt was refused (every slot held for a
// minute) is woken by the release of one slot long before any ttl runs
// out. Its backoff is a minute too, so that only the release notification
// can explain the wake; the release comes after the refusal, so the waiter
// was demonstrably blocked.
func testWakes(t *testing.T, b backends.Backend) {
	const ttl = time.Minute
	name := uniqueName(t)
	probe := backends.NewProbe(t, b.New(t))
	holder := newSem(t, b.New(t), name, 3)
	waiter, err := semaphore.New(probe, name, 3, semaphore.WithBackoff(ttl, ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), ttl/2)
	defer cancel()
	var ps []*semaphore.Permit
	for range 3 {
		p, err := holder.TryAcquire(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	got := make(chan *semaphore.Lease, 1)
	go func() {
		p, err := waiter.Acquire(ctx, ttl)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	probe.WaitRejected(t, 10*time.Second) // every slot busy: the waiter now waits
	released := time.Now()
	if err := ps[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p == nil || p.Slot() != ps[1].Slot() {
		t.Fatalf("woken with %v, want slot %d", p, ps[1].Slot())
	}
	if d := time.Since(released); d > ttl/6 {
		t.Fatalf("woken %v after the release; the ttl and the backoff are %v", d, ttl)
	}
	_ = p.Release(ctx)
	_ = ps[0].Release(ctx)
	_ = ps[2].Release(ctx)
}

// testCrash: a holder renews its permit past its ttl (no one else gets the
// slot), then crashes — its renewals stop, it never releases — and the
// slot is free again within the ttl plus the backend's slack, and not
// before the ttl of the last renewal has run out.
func testCrash(t *testing.T, b backends.Backend) {
	const ttl = 2 * time.Second
	name := uniqueName(t)
	holder, other := newSem(t, b.New(t), name, 1), newSem(t, b.New(t), name, 1)
	ctx := t.Context()
	p, err := holder.TryAcquire(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now() // the grant was made before this
	var (
		mu       sync.Mutex
		lastSent = granted.Add(-ttl) // sent before granted: a lower bound
		stop     = make(chan struct{})
		stopped  = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		tick := time.NewTicker(ttl / 4)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			sent := time.Now()
			if err := p.Extend(ctx, ttl); err != nil {
				t.Errorf("renewal: %v", err)
				return
			}
			mu.Lock()
			lastSent = sent
			mu.Unlock()
		}
	}()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for time.Since(granted) < ttl+ttl/2 {
		if q, err := other.TryAcquire(ctx, ttl); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("%v after the grant, a renewed permit's slot went to %v (%v)", time.Since(granted), q, err)
		}
		<-poll.C
	}
	close(stop) // the crash
	<-stopped
	crashed := time.Now()
	actx, cancel := context.WithTimeout(ctx, ttl+b.Slack)
	defer cancel()
	q, err := other.Acquire(actx, time.Minute)
	if err != nil {
		t.Fatalf("a crashed holder's slot was not free within ttl + slack (%v): %v", ttl+b.Slack, err)
	}
	defer q.Release(context.WithoutCancel(ctx))
	mu.Lock()
	last := lastSent
	mu.Unlock()
	if d := time.Since(last); d < ttl {
		t.Fatalf("the slot was granted again %v after the last renewal was sent, before its ttl %v ran out", d, ttl)
	}
	t.Logf("free %v after the crash (ttl %v)", time.Since(crashed).Round(time.Millisecond), ttl)
}

func testSizeMismatch(t *testing.T, b backends.Backend) {
	name := uniqueName(t)
	three, five := newSem(t, b.New(t), name, 3), newSem(t, b.New(t), name, 5)
	ctx := t.Context()
	p, err := three.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if _, err := five.TryAcquire(ctx, time.Minute); !errors.Is(err, semaphore.ErrSizeMismatch) {
		t.Fatalf("size 5 after size 3: %v, want ErrSizeMismatch", err)
	}
	if _, err := three.Occupancy(ctx); !errors.Is(err, semaphore.ErrSizeMismatch) {
		t.Fatalf("size 3 after size 5 declared itself: %v, want ErrSizeMismatch", err)
	}
}

func testOccupancy(t *testing.T, b backends.Backend) {
	name := uniqueName(t)
	l := b.New(t)
	sem := newSem(t, l, name, 4)
	ctx := t.Context()
	p, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	occ, err := sem.Occupancy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, s := range occ {
		if s.Held {
			held++
			if s.Slot != p.Slot() || s.Grant.Token != p.Token() || s.Grant.Owner == "" {
				t.Fatalf("occupancy %+v, want slot %d token %d", s, p.Slot(), p.Token())
			}
			if o, ok := l.(lock.Owned); ok && s.Grant.Owner != o.Owner() {
				t.Fatalf("owner %q, want %q", s.Grant.Owner, o.Owner())
			}
		}
	}
	if held != 1 || len(occ) != 4 {
		t.Fatalf("occupancy %+v", occ)
	}
	_ = p.Release(ctx)
}

// testObserve: another instance observes the declared size and the held
// slot without writing anything (no size marker of its own appears).
func testObserve(t *testing.T, b backends.Backend) {
	name := uniqueName(t)
	l, watcher := b.New(t), b.New(t)
	sem := newSem(t, l, name, 4)
	ctx := t.Context()
	p, err := sem.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Release(ctx) }()
	for range 2 { // a second Observe sees the same: the first wrote nothing
		o, err := semaphore.Observe(ctx, watcher, name)
		if err != nil {
			t.Fatal(err)
		}
		if o.Name != name || len(o.Sizes) != 1 || o.Sizes[0] != 4 || o.Size() != 4 || len(o.Held) != 1 {
			t.Fatalf("observed %+v, want size 4 and one held slot", o)
		}
		if h := o.Held[0]; h.Slot != p.Slot() || h.Grant.Token != p.Token() || !h.Held {
			t.Fatalf("held %+v, want slot %d token %d", h, p.Slot(), p.Token())
		}
		if slots := o.Slots(4); len(slots) != 4 || !slots[p.Slot()].Held {
			t.Fatalf("slots %+v", slots)
		}
	}
	all, err := semaphore.ObserveAll(ctx, watcher, name)
	if err != nil || len(all) != 1 || all[0].Name != name {
		t.Fatalf("ObserveAll = %+v, %v; want %q only", all, err, name)
	}
}

func testDo(t *testing.T, b backends.Backend) {
	name := uniqueName(t)
	sem, err := semaphore.New(b.New(t), name, 1, semaphore.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other := newSem(t, b.New(t), name, 1)
	err = sem.Do(t.Context(), func(ctx context.Context) error {
		if _, ok := lock.TokenFrom(ctx); !ok {
			t.Error("no token in Do's context")
		}
		select { // three ttls: Keep renews the permit
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(3 * time.Second):
		}
		if _, err := other.TryAcquire(ctx, time.Second); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("the permit was not kept: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := other.TryAcquire(t.Context(), time.Second)
	if err != nil {
		t.Fatalf("slot not released after Do: %v", err)
	}
	_ = p.Release(t.Context())
}

// withoutMultiLock hides the backend's MultiLock and Inspector.
type withoutMultiLock struct{ l lock.Lock }

func (w withoutMultiLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return w.l.TryAcquire(ctx, key, ttl)
}

func testWithoutMultiLock(t *testing.T, b backends.Backend) {
	name := uniqueName(t)
	sem := newSem(t, withoutMultiLock{b.New(t)}, name, 4)
	ctx := t.Context()
	seen := map[int]bool{}
	var ps []*semaphore.Permit
	for range 4 {
		p, err := sem.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if seen[p.Slot()] {
			t.Fatalf("slot %d twice", p.Slot())
		}
		seen[p.Slot()] = true
		ps = append(ps, p)
	}
	if _, err := sem.TryAcquire(ctx, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("fifth permit of four: %v", err)
	}
	for _, p := range ps {
		_ = p.Release(ctx)
	}
}

func TestBadInput(t *testing.T) {
	l := testkit.Must(memlock.New())
	for _, c := range []struct {
		l    lock.Lock
		name string
		size int
	}{{nil, "x", 1}, {l, "", 1}, {l, "a{b}", 1}, {l, "x", 0}, {l, "x", -1}, {l, "x", semaphore.MaxSize + 1}} {
		if _, err := semaphore.New(c.l, c.name, c.size); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("New(%v, %q, %d): %v", c.l, c.name, c.size, err)
		}
	}
	sem := newSem(t, l, "x", 2)
	if _, err := sem.TryAcquire(t.Context(), 0); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("ttl 0: %v", err)
	}
	if err := sem.Do(t.Context(), nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Do(nil): %v", err)
	}
}

// CheckSizes fails a nil Semaphore alone, with ErrInvalidArgument, and
// checks the others (TryAcquireEach takes a nil one too, and fails only
// its request). It used to panic on it.
func TestCheckSizesNilSemaphore(t *testing.T) {
	l := testkit.Must(memlock.New())
	ctx := t.Context()
	three, err := semaphore.New(l, "x", 3) // declares size 3 at its first use
	if err != nil {
		t.Fatal(err)
	}
	p, err := three.TryAcquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	two, err := semaphore.New(l, "x", 2, semaphore.WithoutSizeCheck())
	if err != nil {
		t.Fatal(err)
	}
	alone, err := semaphore.New(l, "y", 1, semaphore.WithoutSizeCheck())
	if err != nil {
		t.Fatal(err)
	}
	errs := semaphore.CheckSizes(ctx, l, "", []*semaphore.Semaphore{two, nil, alone})
	if len(errs) != 3 || !errors.Is(errs[0], semaphore.ErrSizeMismatch) || !errors.Is(errs[1], lock.ErrInvalidArgument) || errs[2] != nil {
		t.Fatalf("CheckSizes(size 2 beside size 3, nil, alone): %v, want [ErrSizeMismatch, ErrInvalidArgument, nil]", errs)
	}
}

// A slot's owner is its grant's, the backend's: a configured Owner that
// differs from the Lock's is refused, by the semaphore, rather than shown
// nowhere.
func TestOwnerIsTheLocks(t *testing.T) {
	l := testkit.Must(memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"})))
	if _, err := semaphore.New(l, "s", 2, semaphore.WithCommon(lock.Common{Owner: "host-a"})); err != nil {
		t.Fatalf("the Lock's own owner: %v", err)
	}
	_, err := semaphore.New(l, "s", 2, semaphore.WithCommon(lock.Common{Owner: "host-b"}))
	if !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "semaphore: invalid argument: ") {
		t.Fatalf("another owner: %v, want it refused by semaphore", err)
	}
}
