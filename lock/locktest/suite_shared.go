package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

func (s *suite) newShared(t testing.TB) lock.SharedLock { return s.newLock(t).(lock.SharedLock) }

func (s *suite) mustShare(t testing.TB, l lock.SharedLock, key string, ttl time.Duration) lock.Handle {
	t.Helper()
	h, err := l.TryAcquireShared(ctxFor(t, s.cfg.waitBound), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquireShared(%q, %v): %v", key, ttl, err)
	}
	if h == nil {
		t.Fatalf("TryAcquireShared(%q) returned a nil handle and no error", key)
	}
	return h
}

// expectShareRefused checks that TryAcquireShared is refused with a
// remaining ttl within (0, atMost] and returns that remaining ttl.
func expectShareRefused(t testing.TB, l lock.SharedLock, key string, atMost time.Duration, why string) time.Duration {
	t.Helper()
	h, err := l.TryAcquireShared(ctxFor(t, 10*time.Second), key, time.Minute)
	if err == nil {
		_ = h.Release(context.Background())
		t.Fatalf("%s: TryAcquireShared(%q) succeeded (token %d)", why, key, h.Token())
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquireShared(%q): want ErrNotAcquired, got %v", why, key, err)
	}
	r := lock.RemainingTTL(err)
	if r <= 0 || r > atMost {
		t.Fatalf("%s: refused share's Remaining = %v, want within (0, %v]", why, r, atMost)
	}
	return r
}

func release(t testing.TB, h lock.Handle, what string) {
	t.Helper()
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("%s: Release: %v", what, err)
	}
}

// sharedBasics: shares of several instances coexist and exclude an
// exclusive grant; an exclusive grant excludes shares; refusals report
// what remains.
func (s *suite) sharedBasics(t *testing.T) {
	a, b, c := s.newShared(t), s.newShared(t), s.newShared(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	ha := s.mustShare(t, a, key, ttl)
	hb := s.mustShare(t, b, key, ttl)
	ha2 := s.mustShare(t, a, key, ttl) // an instance may hold several shares
	if ha.Key() != key || ha.Token() == 0 {
		t.Fatalf("share: Key %q Token %d; want %q and a token above zero", ha.Key(), ha.Token(), key)
	}
	expectNotAcquired(t, c, key, ttl, "shares are held")
	_, err := c.TryAcquire(ctxFor(t, 10*time.Second), key, ttl)
	if r := lock.RemainingTTL(err); r <= 0 || r > ttl {
		t.Fatalf("exclusive refused because of shares: Remaining = %v, want within (0, %v]", r, ttl)
	}
	for _, h := range []lock.Handle{ha, hb, ha2} {
		release(t, h, "share")
	}
	hc := acquireWithin(t, c, key, ttl, s.cfg.waitBound, "an exclusive grant once the shares are released")
	expectShareRefused(t, a, key, ttl, "an exclusive grant is held")
	expectNotAcquired(t, b, key, ttl, "an exclusive grant is held")
	release(t, hc, "exclusive")
	h := acquireSharedWithin(t, b, key, ttl, s.cfg.waitBound, "a share once the exclusive grant is released")
	release(t, h, "share")
}

func acquireSharedWithin(t testing.TB, l lock.SharedLock, key string, ttl, d time.Duration, what string) lock.Handle {
	t.Helper()
	start := time.Now()
	h, err := lock.AcquireShared(ctxFor(t, d), l, key, ttl)
	if err != nil {
		t.Fatalf("%s: AcquireShared(%q) did not succeed within %v (waited %v): %v", what, key, d, time.Since(start).Round(time.Millisecond), err)
	}
	return h
}

// sharedIntent: an exclusive attempt refused because of shares refuses
// new shares for lock.IntentTTL after it, and no longer than that (plus
// slack).
func (s *suite) sharedIntent(t *testing.T) {
	a, b, w := s.newShared(t), s.newShared(t), s.newShared(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	ha := s.mustShare(t, a, key, ttl)
	expectNotAcquired(t, w, key, ttl, "a share is held")
	attempt := time.Now()
	expectShareRefused(t, b, key, lock.IntentTTL, "a writer's attempt was refused because of shares (its intent must refuse new shares)")
	h := acquireSharedWithin(t, b, key, ttl, lock.IntentTTL+s.cfg.slack, "the writer stopped trying: readers wait at most IntentTTL")
	if elapsed := time.Since(attempt); elapsed < lock.IntentTTL/2 {
		t.Fatalf("a share was granted %v after the writer's refused attempt, within the intent's %v", elapsed, lock.IntentTTL)
	}
	release(t, h, "share")
	release(t, ha, "share")
}

// sharedExclusion: 4 instances, each with readers (AcquireShared) and
// writers (Acquire) on one key. Occupancy counters: never a reader beside
// a writer, never two writers. Tokens: a writer's fenced write at the end
// of its hold is refused if a newer grant wrote; a reader that ends its
// hold finds no writer's token above its own (a writer granted while it
// read), and a writer finds no reader granted above its token. The first
// round's holders abandon their grants with a short ttl: no grant of the
// other kind may begin before an abandoned grant's ValidUntil.
func (s *suite) sharedExclusion(t *testing.T) {
	const instances, readers, writers = 4, 6, 2
	key := s.key(t, "k")
	var (
		nReaders, nWriters  atomic.Int32
		overlaps            atomic.Int32
		writes              lock.Fence
		highestReader       atomic.Uint64
		mu                  sync.Mutex
		firstErr            string
		abandonedR          time.Time // latest ValidUntil of an abandoned share
		abandonedW          time.Time // of an abandoned exclusive grant
		wg                  sync.WaitGroup
		readGrants, wGrants atomic.Int32
	)
	fail := func(format string, args ...any) {
		overlaps.Add(1)
		mu.Lock()
		if firstErr == "" {
			firstErr = fmt.Sprintf(format, args...)
		}
		mu.Unlock()
	}
	ctx := ctxFor(t, 2*time.Minute)
	errs := make(chan error, instances*(readers+writers))
	hold := func() {
		for range holdYields {
			runtime.Gosched()
		}
	}
	for i := range instances {
		l := s.newShared(t)
		for g := range readers + writers {
			writer := g < writers
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range s.cfg.rounds {
					abandon := r == 0 && g%2 == 0
					ttl := s.cfg.longTTL
					if abandon {
						ttl = s.cfg.ttl
					}
					var h lock.Handle
					var err error
					if writer {
						h, err = lock.Acquire(ctx, l, key, ttl)
					} else {
						h, err = lock.AcquireShared(ctx, l, key, ttl)
					}
					if err != nil {
						errs <- fmt.Errorf("instance %d goroutine %d round %d: %w", i, g, r, err)
						return
					}
					now := time.Now()
					mu.Lock()
					if writer && now.Before(abandonedR) {
						mu.Unlock()
						fail("a writer (token %d) was granted %v before an abandoned share's ValidUntil", h.Token(), abandonedR.Sub(now))
						mu.Lock()
					}
					if !writer && now.Before(abandonedW) {
						mu.Unlock()
						fail("a reader (token %d) was granted %v before an abandoned exclusive grant's ValidUntil", h.Token(), abandonedW.Sub(now))
						mu.Lock()
					}
					if abandon {
						// Left to expire: checked by its ValidUntil only,
						// as its short ttl may pass during the hold.
						if writer {
							wGrants.Add(1)
							abandonedW = later(abandonedW, h.ValidUntil())
						} else {
							readGrants.Add(1)
							abandonedR = later(abandonedR, h.ValidUntil())
						}
						mu.Unlock()
						continue
					}
					mu.Unlock()
					if writer {
						wGrants.Add(1)
						if n := nWriters.Add(1); n != 1 {
							fail("%d writers held the key at once", n)
						}
						if n := nReaders.Load(); n != 0 {
							fail("a writer (token %d) held the key beside %d readers", h.Token(), n)
						}
						hold()
						if hr := highestReader.Load(); hr > h.Token() {
							fail("a reader (token %d) was granted while a writer (token %d) held the key", hr, h.Token())
						}
						if err := writes.Do(h.Token(), nil); err != nil {
							fail("a writer's fenced write was refused: %v", err)
						}
						nWriters.Add(-1)
					} else {
						readGrants.Add(1)
						for {
							hr := highestReader.Load()
							if h.Token() <= hr || highestReader.CompareAndSwap(hr, h.Token()) {
								break
							}
						}
						nReaders.Add(1)
						if n := nWriters.Load(); n != 0 {
							fail("a reader (token %d) held the key beside a writer", h.Token())
						}
						hold()
						if hw := writes.Highest(); hw > h.Token() {
							fail("a writer (token %d) wrote while a reader (token %d) held the key", hw, h.Token())
						}
						nReaders.Add(-1)
					}
					if err := h.Release(ctx); err != nil {
						errs <- fmt.Errorf("instance %d goroutine %d round %d: Release: %w", i, g, r, err)
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
		t.Errorf("shared grant safety violated %d times; first: %s", n, firstErr)
	}
	if t.Failed() {
		return
	}
	if got, want := int(readGrants.Load()+wGrants.Load()), instances*(readers+writers)*s.cfg.rounds; got != want {
		t.Errorf("%d grants, want %d", got, want)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sharedWriterNotStarved: readers re-acquire back to back (each takes its
// next share before it gives up the last, so that shares are held without
// a gap for as long as new ones are granted); a writer's lock.Acquire must
// win within the readers' ttl + lock.IntentTTL + slack, three times.
func (s *suite) sharedWriterNotStarved(t *testing.T) {
	const readers = 4
	key := s.key(t, "k")
	ttl := s.cfg.ttl
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var grants atomic.Int64
	errs := make(chan error, readers)
	for i := range readers {
		l := s.newShared(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := lock.AcquireShared(ctx, l, key, ttl)
			for err == nil {
				grants.Add(1)
				runtime.Gosched()
				next, nerr := l.TryAcquireShared(ctx, key, ttl)
				if nerr != nil {
					// Refused (a writer waits): give the share up, then wait.
					if rerr := h.Release(context.Background()); rerr != nil && ctx.Err() == nil {
						errs <- fmt.Errorf("reader %d: Release: %w", i, rerr)
						return
					}
					next, nerr = lock.AcquireShared(ctx, l, key, ttl)
				} else if rerr := h.Release(context.Background()); rerr != nil && ctx.Err() == nil {
					errs <- fmt.Errorf("reader %d: Release: %w", i, rerr)
					return
				}
				h, err = next, nerr
			}
			if ctx.Err() == nil {
				errs <- fmt.Errorf("reader %d: %w", i, err)
			}
		}()
	}
	// The readers are under way before the writer comes.
	waitFor(t, s.cfg.waitBound, "the readers' first grants", func() bool { return grants.Load() >= 2*readers })
	w := s.newShared(t)
	bound := ttl + lock.IntentTTL + s.cfg.slack
	for round := range 3 {
		before := grants.Load()
		start := time.Now()
		h, err := lock.Acquire(ctxFor(t, bound), w, key, s.cfg.longTTL)
		if err != nil {
			stop()
			wg.Wait()
			t.Fatalf("round %d: a writer was starved by continuous readers: no grant within %v (readers' ttl %v + IntentTTL %v + slack %v; %d reader grants meanwhile): %v",
				round, time.Since(start).Round(time.Millisecond), ttl, lock.IntentTTL, s.cfg.slack, grants.Load()-before, err)
		}
		release(t, h, "writer")
		// Let the readers back in before the next round.
		n := grants.Load()
		waitFor(t, s.cfg.waitBound, "the readers' grants after the writer's release", func() bool { return grants.Load() >= n+readers })
	}
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// sharedAbandoned: a share whose holder never releases it frees within its
// ttl + slack; the writer is not granted before the share's ValidUntil and
// gets a larger token; the old share's Extend and Release return ErrLost.
func (s *suite) sharedAbandoned(t *testing.T) {
	a, b, c := s.newShared(t), s.newShared(t), s.newShared(t)
	key := s.key(t, "k")
	ha := s.mustShare(t, a, key, s.cfg.ttl)
	hb := s.takeOver(t, "share", ha, ha.Token(), b, c, key)
	expectShareRefused(t, c, key, s.cfg.longTTL, "the writer must still exclude shares after the old share's Extend and Release")
	release(t, hb, "writer")
}

// sharedExtendRelease: Extend renews a share (ValidUntil counted from the
// send time), Release of one share leaves the others, a second Release
// and an Extend after Release return ErrLost and take nothing back.
func (s *suite) sharedExtendRelease(t *testing.T) {
	a, b, w := s.newShared(t), s.newShared(t), s.newShared(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	ha := s.mustShare(t, a, key, ttl)
	hb := s.mustShare(t, b, key, ttl)
	before := time.Now()
	if err := ha.Extend(ctxFor(t, 10*time.Second), ttl); err != nil {
		t.Fatalf("Extend of a share: %v", err)
	}
	checkValidity(t, "share after Extend", ha.ValidUntil(), before, time.Now(), ttl)
	release(t, ha, "the first share")
	expectNotAcquired(t, w, key, ttl, "the second share is still held")
	expectLost(t, ha.Release(ctxFor(t, 10*time.Second)), "second Release of a share")
	expectLost(t, ha.Extend(ctxFor(t, 10*time.Second), ttl), "Extend of a released share")
	if err := hb.Extend(ctxFor(t, 10*time.Second), ttl); err != nil {
		t.Fatalf("Extend of the other share after the first one's Release: %v", err)
	}
	release(t, hb, "the second share")
	hw := acquireWithin(t, w, key, ttl, s.cfg.waitBound, "no share is left")
	expectLost(t, hb.Extend(ctxFor(t, 10*time.Second), ttl), "Extend of a released share, with a writer holding the key")
	expectLost(t, hb.Release(ctxFor(t, 10*time.Second)), "Release of a released share, with a writer holding the key")
	expectNotAcquired(t, a, key, ttl, "the writer must still hold the key")
	release(t, hw, "writer")
}

// sharedKeep: lock.Keep keeps a share with a short ttl alive past three
// ttls; a writer is refused all the while; Release frees the key.
func (s *suite) sharedKeep(t *testing.T) {
	a, w := s.newShared(t), s.newShared(t)
	key := s.key(t, "k")
	ttl := s.cfg.ttl
	h := s.mustShare(t, a, key, ttl)
	lease, err := lock.Keep(context.Background(), h, ttl)
	if err != nil {
		t.Fatalf("Keep of a share: %v", err)
	}
	select {
	case <-lease.Context().Done():
		t.Fatalf("kept share lost while renewing: %v", context.Cause(lease.Context()))
	case <-time.After(3 * ttl):
	}
	if hw, err := w.TryAcquire(ctxFor(t, 10*time.Second), key, ttl); err == nil {
		_ = hw.Release(context.Background())
		t.Fatalf("a writer was granted (token %d) beside a kept share (lease error %v)", hw.Token(), lease.Err())
	}
	if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release of a kept share: %v", err)
	}
	hw := acquireWithin(t, w, key, ttl, s.cfg.waitBound, "after the kept share's Release")
	release(t, hw, "writer")
}

// sharedTokens: every grant's token exceeds every earlier one's, shared or
// exclusive, so a writer's fenced write refuses every reader that came
// before it, and two readers' tokens differ.
func (s *suite) sharedTokens(t *testing.T) {
	a, b, w := s.newShared(t), s.newShared(t), s.newShared(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	hw0 := s.mustAcquire(t, w, key, ttl)
	release(t, hw0, "writer")
	r1 := s.mustShare(t, a, key, ttl)
	r2 := s.mustShare(t, b, key, ttl)
	if r1.Token() <= hw0.Token() || r2.Token() <= r1.Token() {
		t.Fatalf("tokens: writer %d, then readers %d and %d; want each larger than the last", hw0.Token(), r1.Token(), r2.Token())
	}
	var f lock.Fence
	if err := f.Do(r1.Token(), nil); err != nil {
		t.Fatalf("reader's fenced write on a fresh resource: %v", err)
	}
	release(t, r1, "reader")
	release(t, r2, "reader")
	hw := acquireWithin(t, w, key, ttl, s.cfg.waitBound, "after the readers")
	if err := f.Do(hw.Token(), nil); err != nil {
		t.Fatalf("writer (token %d) after readers (%d, %d): fenced write refused: %v", hw.Token(), r1.Token(), r2.Token(), err)
	}
	for _, r := range []lock.Handle{r1, r2} {
		if err := f.Do(r.Token(), nil); !errors.Is(err, lock.ErrStaleToken) {
			t.Fatalf("a reader's token %d after the writer's %d wrote: want ErrStaleToken, got %v", r.Token(), hw.Token(), err)
		}
	}
	release(t, hw, "writer")
	r3 := s.mustShare(t, a, key, ttl)
	if r3.Token() <= hw.Token() {
		t.Fatalf("reader's token %d after the writer's %d, want larger", r3.Token(), hw.Token())
	}
	release(t, r3, "reader")
}

// sharedWaiter, on a Waiter: a blocked AcquireShared wakes at the
// exclusive grant's release, and a blocked Acquire at the last share's,
// long before the ttl (and before the writer's periodic retry).
func (s *suite) sharedWaiter(t *testing.T) {
	probe := s.newLock(t)
	if _, ok := probe.(lock.Waiter); !ok {
		t.Skipf("%T does not implement lock.Waiter", probe)
	}
	a, b := s.newShared(t), s.newShared(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	bound := lock.IntentTTL / 4 // below the retry period of a waiting writer

	// A reader waits for a writer.
	hw := s.mustAcquire(t, a, key, ttl)
	ob := &observedShared{SharedLock: b, Waiter: b.(lock.Waiter), failed: make(chan struct{})}
	got := make(chan lock.Handle, 1)
	errc := make(chan error, 1)
	go func() {
		h, err := lock.AcquireShared(ctxFor(t, s.cfg.waitBound), ob, key, ttl)
		if err != nil {
			errc <- err
			return
		}
		got <- h
	}()
	select {
	case <-ob.failed:
	case err := <-errc:
		t.Fatalf("AcquireShared: %v", err)
	case h := <-got:
		_ = h.Release(context.Background())
		t.Fatalf("AcquireShared granted a share (token %d) beside the writer", h.Token())
	}
	released := time.Now()
	release(t, hw, "writer")
	var hr lock.Handle
	select {
	case hr = <-got:
		if d := time.Since(released); d > bound {
			t.Fatalf("a blocked AcquireShared took %v after the writer's release, want within %v (no polling)", d.Round(time.Millisecond), bound)
		}
	case err := <-errc:
		t.Fatalf("blocked AcquireShared was not woken by the release: %v", err)
	}

	// A writer waits for the reader.
	wgot := make(chan lock.Handle, 1)
	werr := make(chan error, 1)
	go func() {
		h, err := lock.Acquire(ctxFor(t, s.cfg.waitBound), a, key, ttl)
		if err != nil {
			werr <- err
			return
		}
		wgot <- h
	}()
	// Once the writer waits, it refuses new shares; then the share goes.
	waitFor(t, s.cfg.waitBound, "the waiting writer to refuse new shares", func() bool {
		h, err := b.TryAcquireShared(ctxFor(t, 10*time.Second), key, ttl)
		if err == nil {
			_ = h.Release(context.Background())
		}
		return errors.Is(err, lock.ErrNotAcquired)
	})
	released = time.Now()
	release(t, hr, "reader")
	select {
	case h := <-wgot:
		if d := time.Since(released); d > bound {
			t.Fatalf("a blocked Acquire took %v after the last share's release, want within %v (no polling)", d.Round(time.Millisecond), bound)
		}
		release(t, h, "writer")
	case err := <-werr:
		t.Fatalf("blocked Acquire was not woken by the last share's release: %v", err)
	}
}

// observedShared signals the first refused attempt of a blocking
// AcquireShared.
type observedShared struct {
	lock.SharedLock
	lock.Waiter
	failed chan struct{}
	once   sync.Once
}

func (o *observedShared) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := o.SharedLock.TryAcquireShared(ctx, key, ttl)
	if errors.Is(err, lock.ErrNotAcquired) {
		o.once.Do(func() { close(o.failed) })
	}
	return h, err
}

// waitFor polls cond until it holds, and fails t if that takes longer than
// bound.
func waitFor(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", bound, what)
		}
		time.Sleep(time.Millisecond) // polling with a bound
	}
}

// sharedInspector, on an Inspector: List reports each share of a key
// (Shared, its holder's owner and token), Inspect the one that expires
// first; an exclusive grant is not Shared.
func (s *suite) sharedInspector(t *testing.T) {
	skipUnless[lock.Inspector](t, s)
	a, b := s.newShared(t), s.newShared(t)
	in := a.(lock.Inspector)
	prefix := s.key(t, "")
	key := prefix + "k"
	ra := s.mustShare(t, a, key, s.cfg.longTTL)
	rb := s.mustShare(t, b, key, s.cfg.longTTL/2)
	ctx := ctxFor(t, 30*time.Second)
	g, ok, err := in.Inspect(ctx, key)
	if err != nil || !ok || !g.Shared || g.Token != rb.Token() {
		t.Fatalf("Inspect of a key with two shares = %+v, %v, %v; want the share that expires first (token %d), Shared", g, ok, err, rb.Token())
	}
	list, err := in.List(ctx, prefix)
	if err != nil || len(list) != 2 {
		t.Fatalf("List of a key with two shares = %+v, %v; want one entry per share", list, err)
	}
	tokens := map[uint64]bool{}
	for _, g := range list {
		if g.Key != key || !g.Shared || g.Group != "" || g.Remaining <= 0 {
			t.Fatalf("List entry %+v: want a share of %q", g, key)
		}
		tokens[g.Token] = true
	}
	if !tokens[ra.Token()] || !tokens[rb.Token()] {
		t.Fatalf("List tokens %v, want %d and %d", tokens, ra.Token(), rb.Token())
	}
	if o, ok := b.(lock.Owned); ok && g.Owner != o.Owner() {
		t.Fatalf("Inspect owner %q, want the holder's %q", g.Owner, o.Owner())
	}
	release(t, ra, "share")
	release(t, rb, "share")
	hw := s.mustAcquire(t, b, key, s.cfg.longTTL)
	if g, ok, err := in.Inspect(ctx, key); err != nil || !ok || g.Shared || g.Token != hw.Token() {
		t.Fatalf("Inspect of an exclusive grant = %+v, %v, %v; want token %d, not Shared", g, ok, err, hw.Token())
	}
	release(t, hw, "writer")
}
