package locktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/stacks"
	"github.com/leasehold-go/leasehold/lock"
)

// cancelStorm: acquires cancelled before, during and after they reach the
// backend leave no goroutine behind and no grant longer than the ttl.
func (s *suite) cancelStorm(t *testing.T) {
	l, other := s.newLock(t), s.newLock(t)
	free := s.key(t, "free")
	held := s.key(t, "held")
	holder := s.mustAcquire(t, other, held, s.cfg.longTTL)
	defer holder.Release(context.Background())

	// An acquire with a context that is already done fails and grants nothing.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if h, err := l.TryAcquire(done, free, s.cfg.ttl); err == nil {
		_ = h.Release(context.Background())
		t.Fatalf("TryAcquire with a cancelled context succeeded")
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire with a cancelled context: want context.Canceled, got %v", err)
	}
	h := s.mustAcquire(t, other, free, s.cfg.longTTL)
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}

	storm := func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []lock.Handle
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.N(3000))*time.Microsecond)
				defer cancel()
				var h lock.Handle
				var err error
				switch i % 3 {
				case 0:
					h, err = l.TryAcquire(ctx, free, s.cfg.ttl)
				case 1:
					h, err = lock.Acquire(ctx, l, free, s.cfg.ttl)
				default:
					h, err = lock.Acquire(ctx, l, held, s.cfg.ttl) // blocked until cancelled
				}
				if err == nil {
					mu.Lock()
					won = append(won, h)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for _, h := range won {
			_ = h.Release(context.Background())
		}
	}
	storm() // warm up: connection pools, subscriptions
	// A blocked Acquire returns promptly when its context is cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := lock.Acquire(ctx, l, held, s.cfg.ttl); errc <- err }()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire: want context.Canceled, got %v", err)
		}
	case <-time.After(s.cfg.waitBound):
		t.Fatalf("a blocked Acquire did not return within %v of its cancellation", s.cfg.waitBound)
	}
	base := stacks.All()
	storm()
	storm()
	// Bounded wait for goroutines that are on their way out.
	deadline := time.Now().Add(s.cfg.waitBound)
	n := runtime.NumGoroutine()
	for n > len(base)+2 && time.Now().Before(deadline) {
		runtime.Gosched()
		<-time.After(10 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > len(base)+2 {
		added := newGoroutines(base)
		t.Fatalf("goroutines leaked by cancelled acquires: %d before, %d after; the %d that did not run before:\n\n%s",
			len(base), n, len(added), strings.Join(added, "\n\n"))
	}
	// Whatever a cancelled acquire left at the backend expires with its ttl.
	h = acquireWithin(t, other, free, s.cfg.longTTL, s.cfg.ttl+s.cfg.slack, "after a cancel storm")
	_ = h.Release(context.Background())
}

// newGoroutines returns the stacks of the goroutines that run now and did
// not in base.
func newGoroutines(base map[string]string) []string {
	var added []string
	for id, g := range stacks.All() {
		if _, ok := base[id]; !ok {
			added = append(added, g)
		}
	}
	return added
}

// badInput: every bad input gets an error that matches ErrInvalidArgument
// (or the specific sentinel), never a panic or a hang.
func (s *suite) badInput(t *testing.T) {
	l := s.newLock(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	var nilCtx context.Context
	ctx := context.Background()
	long := strings.Repeat("k", lock.MaxKeyLen+1)
	exact := s.key(t, "") + strings.Repeat("x", lock.MaxKeyLen-len(s.key(t, "")))

	h := s.mustAcquire(t, l, exact, ttl) // a key of exactly MaxKeyLen bytes is fine
	type call struct {
		name string
		want error
		fn   func() error
	}
	calls := []call{
		{"TryAcquire empty key", lock.ErrInvalidKey, func() error { return discard(l.TryAcquire(ctx, "", ttl)) }},
		{"TryAcquire key over 1 KiB", lock.ErrInvalidKey, func() error { return discard(l.TryAcquire(ctx, long, ttl)) }},
		{"TryAcquire zero ttl", lock.ErrInvalidTTL, func() error { return discard(l.TryAcquire(ctx, key, 0)) }},
		{"TryAcquire negative ttl", lock.ErrInvalidTTL, func() error { return discard(l.TryAcquire(ctx, key, -time.Second)) }},
		{"TryAcquire nil context", lock.ErrInvalidArgument, func() error { return discard(l.TryAcquire(nilCtx, key, ttl)) }},
		{"Acquire empty key", lock.ErrInvalidKey, func() error { return discard(lock.Acquire(ctx, l, "", ttl)) }},
		{"Acquire zero ttl", lock.ErrInvalidTTL, func() error { return discard(lock.Acquire(ctx, l, key, 0)) }},
		{"Acquire nil context", lock.ErrInvalidArgument, func() error { return discard(lock.Acquire(nilCtx, l, key, ttl)) }},
		{"Extend zero ttl", lock.ErrInvalidTTL, func() error { return h.Extend(ctx, 0) }},
		{"Extend negative ttl", lock.ErrInvalidTTL, func() error { return h.Extend(ctx, -1) }},
		{"Extend nil context", lock.ErrInvalidArgument, func() error { return h.Extend(nilCtx, ttl) }},
		{"Release nil context", lock.ErrInvalidArgument, func() error { return h.Release(nilCtx) }},
		{"Do nil function", lock.ErrInvalidArgument, func() error { return lock.Do(ctx, l, key, nil) }},
		{"Keep nil handle", lock.ErrInvalidArgument, func() error { _, err := lock.Keep(ctx, nil, ttl); return err }},
		{"Keep zero ttl", lock.ErrInvalidTTL, func() error { _, err := lock.Keep(ctx, h, 0); return err }},
	}
	if s.cfg.minTTL > 0 && !s.cfg.roundsUp {
		calls = append(calls, call{"TryAcquire ttl below the minimum", lock.ErrInvalidTTL,
			func() error { return discard(l.TryAcquire(ctx, key, s.cfg.minTTL/2)) }})
	}
	if m, ok := l.(lock.MultiLock); ok {
		calls = append(calls,
			call{"TryAcquireAny no keys", lock.ErrInvalidKey, func() error { return discard(m.TryAcquireAny(ctx, nil, ttl)) }},
			call{"TryAcquireAny an empty key", lock.ErrInvalidKey, func() error { return discard(m.TryAcquireAny(ctx, []string{key, ""}, ttl)) }},
			call{"TryAcquireAny zero ttl", lock.ErrInvalidTTL, func() error { return discard(m.TryAcquireAny(ctx, []string{key}, 0)) }},
			call{"TryAcquireAny nil context", lock.ErrInvalidArgument, func() error { return discard(m.TryAcquireAny(nilCtx, []string{key}, ttl)) }},
		)
	}
	if w, ok := l.(lock.Waiter); ok {
		calls = append(calls,
			call{"Subscribe no keys", lock.ErrInvalidKey, func() error { return discardSub(w.Subscribe(ctx)) }},
			call{"Subscribe key over 1 KiB", lock.ErrInvalidKey, func() error { return discardSub(w.Subscribe(ctx, long)) }},
			call{"Subscribe nil context", lock.ErrInvalidArgument, func() error { return discardSub(w.Subscribe(nilCtx, key)) }},
		)
	}
	if in, ok := l.(lock.Inspector); ok {
		calls = append(calls,
			call{"Inspect empty key", lock.ErrInvalidKey, func() error { _, _, err := in.Inspect(ctx, ""); return err }},
			call{"Inspect nil context", lock.ErrInvalidArgument, func() error { _, _, err := in.Inspect(nilCtx, key); return err }},
		)
	}
	// A Keeper's and a kept lease's calls with a nil context are refused
	// and leave them as they were: Keeper.Close(nil) panicked on pglock
	// (and leaked the Batch's session), a Keeper lease's Release(nil)
	// during a renewal round panicked, and between rounds it gave the
	// lease up without releasing it.
	k, err := lock.NewKeeper(l, ttl)
	if err != nil {
		t.Fatalf("NewKeeper: %v", err)
	}
	kl, err := k.TryAcquire(ctx, s.key(t, "kept-by-keeper"))
	if err != nil {
		t.Fatalf("Keeper.TryAcquire: %v", err)
	}
	sl, err := lock.Keep(ctx, s.mustAcquire(t, l, s.key(t, "kept"), ttl), ttl)
	if err != nil {
		t.Fatalf("Keep: %v", err)
	}
	calls = append(calls,
		call{"Keeper.Close nil context", lock.ErrInvalidArgument, func() error { return k.Close(nilCtx) }},
		call{"a Keeper's Lease.Release nil context", lock.ErrInvalidArgument, func() error { return kl.Release(nilCtx) }},
		call{"Lease.Release nil context", lock.ErrInvalidArgument, func() error { return sl.Release(nilCtx) }},
	)
	for _, c := range calls {
		err := guarded(t, c.name, s.cfg.waitBound, c.fn)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: want an error matching %v, got %v", c.name, c.want, err)
		} else if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v does not match ErrInvalidArgument", c.name, err)
		}
	}
	if kl.Context().Err() != nil || sl.Context().Err() != nil {
		t.Errorf("leases after a Release(nil): contexts %v, %v; want them alive", kl.Context().Err(), sl.Context().Err())
	}
	for what, err := range map[string]error{"a Keeper's lease": kl.Release(ctx), "a kept lease": sl.Release(ctx), "the Keeper": k.Close(ctx)} {
		if err != nil {
			t.Errorf("Release of %s after the nil calls: %v", what, err)
		}
	}
	// Use after Release.
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, c := range []call{
		{"Extend after Release", lock.ErrLost, func() error { return h.Extend(ctx, ttl) }},
		{"Release after Release", lock.ErrLost, func() error { return h.Release(ctx) }},
	} {
		if err := guarded(t, c.name, s.cfg.waitBound, c.fn); !errors.Is(err, c.want) {
			t.Errorf("%s: want %v, got %v", c.name, c.want, err)
		}
	}
	// Nothing above may have taken the key.
	h2 := s.mustAcquire(t, l, key, ttl)
	_ = h2.Release(ctx)
}

func discard(h lock.Handle, err error) error {
	if h != nil {
		_ = h.Release(context.Background())
		if err == nil {
			return errors.New("succeeded and returned a grant")
		}
	}
	return err
}

func discardSub(s lock.Subscription, err error) error {
	if s != nil {
		_ = s.Close()
		if err == nil {
			return errors.New("succeeded and returned a subscription")
		}
	}
	return err
}

// guarded runs fn, turning a panic or a hang into a test failure.
func guarded(t testing.TB, name string, bound time.Duration, fn func() error) error {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				res <- fmt.Errorf("panic: %v", r)
			}
		}()
		res <- fn()
	}()
	select {
	case err := <-res:
		return err
	case <-time.After(bound):
		t.Fatalf("%s: no answer within %v", name, bound)
		return nil
	}
}

func (s *suite) waiter(t *testing.T) {
	probe := s.newLock(t)
	if _, ok := probe.(lock.Waiter); !ok {
		t.Skipf("%T does not implement lock.Waiter", probe)
	}
	a, b := s.newLock(t), s.newLock(t)
	w := b.(lock.Waiter)
	key := s.key(t, "k")

	// A release between Subscribe and Wait is not lost.
	h := s.mustAcquire(t, a, key, s.cfg.longTTL)
	sub, err := w.Subscribe(ctxFor(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Close()
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	start := time.Now()
	if err := sub.Wait(ctxFor(t, s.cfg.waitBound), time.Hour); err != nil {
		t.Fatalf("Wait after a release that happened before it: %v (after %v)", err, time.Since(start))
	}

	// Wait respects its context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := sub.Wait(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with no release and an expiring context: want DeadlineExceeded, got %v", err)
	}

	// Handoff: a blocked Acquire gets the key on release, long before the ttl.
	h = s.mustAcquire(t, a, key, s.cfg.longTTL)
	ob := &observed{Lock: b, Waiter: w, failed: make(chan struct{})}
	got := make(chan lock.Handle, 1)
	errc := make(chan error, 1)
	go func() {
		hb, err := lock.Acquire(ctxFor(t, s.cfg.waitBound), ob, key, s.cfg.longTTL)
		if err != nil {
			errc <- err
			return
		}
		got <- hb
	}()
	select {
	case <-ob.failed: // the waiter is past its failed attempt: now it waits
	case err := <-errc:
		t.Fatalf("Acquire: %v", err)
	case hb := <-got:
		_ = hb.Release(context.Background())
		t.Fatalf("Acquire granted %q (token %d) while it was held", key, hb.Token())
	}
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case hb := <-got:
		_ = hb.Release(context.Background())
	case err := <-errc:
		t.Fatalf("blocked Acquire was not woken by the release (ttl %v): %v", s.cfg.longTTL, err)
	}
}

// observed signals the first failed attempt of a blocking Acquire.
type observed struct {
	lock.Lock
	lock.Waiter
	failed chan struct{}
	once   sync.Once
}

func (o *observed) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := o.Lock.TryAcquire(ctx, key, ttl)
	if errors.Is(err, lock.ErrNotAcquired) {
		o.once.Do(func() { close(o.failed) })
	}
	return h, err
}

func (s *suite) multiLock(t *testing.T) {
	probe := s.newLock(t)
	if _, ok := probe.(lock.MultiLock); !ok {
		t.Skipf("%T does not implement lock.MultiLock", probe)
	}
	a, b := s.newLock(t), s.newLock(t)
	m := b.(lock.MultiLock)
	// The keys share a hash tag, as the slots of a semaphore do (Redis
	// Cluster needs that for a one-round-trip TryAcquireAny).
	keys := []string{s.key(t, "{slots}/0"), s.key(t, "{slots}/1"), s.key(t, "{slots}/2"), s.key(t, "{slots}/3")}
	ttl := s.cfg.longTTL
	var held []lock.Handle
	for _, i := range []int{0, 1, 3} {
		held = append(held, s.mustAcquire(t, a, keys[i], ttl))
	}
	for range 5 { // whatever the random start, the one free key is found
		h, err := m.TryAcquireAny(ctxFor(t, 10*time.Second), keys, ttl)
		if err != nil {
			t.Fatalf("TryAcquireAny with one free key: %v", err)
		}
		if h.Key() != keys[2] {
			t.Fatalf("TryAcquireAny granted %q, the free key is %q", h.Key(), keys[2])
		}
		expectNotAcquired(t, a, keys[2], ttl, "the key TryAcquireAny granted")
		if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	h := s.mustAcquire(t, a, keys[2], ttl)
	held = append(held, h)
	if _, err := m.TryAcquireAny(ctxFor(t, 10*time.Second), keys, ttl); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAny with all keys held: want ErrNotAcquired, got %v", err)
	}
	prev := held[1].Token()
	if err := held[1].Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	h, err := m.TryAcquireAny(ctxFor(t, 10*time.Second), keys, ttl)
	if err != nil || h.Key() != keys[1] {
		t.Fatalf("TryAcquireAny after keys[1] was released: %v, %v", h, err)
	}
	if h.Token() <= prev {
		t.Fatalf("token %d after %d on the same key", h.Token(), prev)
	}
	held = append(held, h)
	for _, h := range held {
		_ = h.Release(context.Background())
	}
}

func (s *suite) inspector(t *testing.T) {
	probe := s.newLock(t)
	if _, ok := probe.(lock.Inspector); !ok {
		t.Skipf("%T does not implement lock.Inspector", probe)
	}
	a, b := s.newLock(t), s.newLock(t)
	in := b.(lock.Inspector)
	ctx := ctxFor(t, 30*time.Second)
	prefix := s.key(t, "")
	k1, k2, k3 := prefix+"a", prefix+"b", prefix+"c"
	ttl := s.cfg.longTTL
	h1 := s.mustAcquire(t, a, k1, ttl)
	h2 := s.mustAcquire(t, a, k2, ttl)
	h3 := s.mustAcquire(t, b, k3, ttl)
	defer h3.Release(context.Background())

	g, ok, err := in.Inspect(ctx, k1)
	if err != nil || !ok {
		t.Fatalf("Inspect of a held key: %v, %v, %v", g, ok, err)
	}
	if g.Key != k1 || g.Token != h1.Token() || g.Remaining <= 0 || g.Remaining > ttl || g.Owner == "" {
		t.Fatalf("Inspect = %+v; want key %q, token %d, remaining in (0, %v], an owner", g, k1, h1.Token(), ttl)
	}
	if g.Since.After(time.Now().Add(time.Second)) || g.Since.Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("Inspect Since = %v, want about now (%v)", g.Since, time.Now())
	}
	if o, ok := a.(lock.Owned); ok && g.Owner != o.Owner() {
		t.Fatalf("Inspect owner %q, want the holder's %q", g.Owner, o.Owner())
	}
	list, err := in.List(ctx, prefix)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 3 || list[0].Key != k1 || list[1].Key != k2 || list[2].Key != k3 {
		t.Fatalf("List(%q) = %+v, want %q, %q, %q in order", prefix, list, k1, k2, k3)
	}
	if list[0].Owner != list[1].Owner || list[0].Owner == list[2].Owner {
		t.Fatalf("owners %q, %q, %q: the first two share an instance, the third is another", list[0].Owner, list[1].Owner, list[2].Owner)
	}
	if list[1].Token != h2.Token() {
		t.Fatalf("List token %d, want %d", list[1].Token, h2.Token())
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, ok, err := in.Inspect(ctx, k1); err != nil || ok {
		t.Fatalf("Inspect after Release: ok=%v err=%v, want a free key", ok, err)
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	list, err = in.List(ctx, prefix)
	if err != nil || len(list) != 1 || list[0].Key != k3 {
		t.Fatalf("List after two releases = %+v, %v; want only %q", list, err, k3)
	}
}
