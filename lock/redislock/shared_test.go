package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

func sharedLock(t *testing.T) *redislock.Lock {
	t.Helper()
	return newLock(t, newClient(t, testenv.Redis(t).Addr()))
}

func share(t *testing.T, l *redislock.Lock, key string, ttl time.Duration) lock.Handle {
	t.Helper()
	h, err := l.TryAcquireShared(t.Context(), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquireShared(%q): %v", key, err)
	}
	return h
}

// wantRefused checks that err is ErrNotAcquired with a Remaining in (0, most].
func wantRefused(t *testing.T, what string, err error, most time.Duration) {
	t.Helper()
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
	}
	if r := lock.RemainingTTL(err); r <= 0 || r > most {
		t.Fatalf("%s: remaining %v, want in (0, %v]", what, r, most)
	}
}

// Shares coexist, each with its own token above every earlier grant's; an
// exclusive attempt is refused while they last (with the latest share's
// remaining ttl), and Inspect and List report them.
func TestSharesCoexist(t *testing.T) {
	l := sharedLock(t)
	ctx := t.Context()
	key := testKey(t)
	ex := mustAcquire(t, l, key, time.Minute)
	if err := ex.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := share(t, l, key, time.Minute)
	b := share(t, l, key, 2*time.Minute)
	if !(ex.Token() < a.Token() && a.Token() < b.Token()) {
		t.Fatalf("tokens exclusive %d, shares %d %d: want increasing", ex.Token(), a.Token(), b.Token())
	}
	_, err := l.TryAcquire(ctx, key, time.Minute)
	wantRefused(t, "TryAcquire beside shares", err, 2*time.Minute)
	if r := lock.RemainingTTL(err); r <= time.Minute {
		t.Fatalf("remaining %v: want the latest share's (about 2m)", r)
	}
	g, ok, err := l.Inspect(ctx, key)
	if err != nil || !ok || !g.Shared || g.Token != a.Token() || g.Owner != l.Owner() {
		t.Fatalf("Inspect = %+v %v %v, want the share that expires first (token %d)", g, ok, err, a.Token())
	}
	gs, err := l.List(ctx, key)
	if err != nil || len(gs) != 2 || !gs[0].Shared || !gs[1].Shared || gs[0].Token+gs[1].Token != a.Token()+b.Token() {
		t.Fatalf("List = %+v %v, want both shares", gs, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h := mustAcquire(t, l, key, time.Minute)
	if h.Token() <= b.Token() {
		t.Fatalf("exclusive token %d after share %d", h.Token(), b.Token())
	}
	if _, ok, _ := l.Inspect(ctx, key); !ok {
		t.Fatal("Inspect: the exclusive grant is not reported")
	}
}

func mustAcquire(t *testing.T, l lock.Lock, key string, ttl time.Duration) lock.Handle {
	t.Helper()
	h, err := l.TryAcquire(t.Context(), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	return h
}

// An exclusive grant refuses shares with its remaining ttl; its Extend and
// Release never touch the shares made after it was gone.
func TestExclusiveExcludesShares(t *testing.T) {
	l := sharedLock(t)
	ctx := t.Context()
	key := testKey(t)
	ex := mustAcquire(t, l, key, 300*time.Millisecond)
	_, err := l.TryAcquireShared(ctx, key, time.Minute)
	wantRefused(t, "TryAcquireShared beside an exclusive grant", err, 300*time.Millisecond)
	// The exclusive grant expires; shares take the key.
	s, err := lock.AcquireShared(ctx, l, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("exclusive Extend over shares: %v, want ErrLost", err)
	}
	if err := ex.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("exclusive Release over shares: %v, want ErrLost", err)
	}
	if err := s.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("the share after the exclusive calls: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("second Release of a share: %v, want ErrLost", err)
	}
	if err := s.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of a released share: %v, want ErrLost", err)
	}
}

// A share's Extend and Release act on that share only: another share's
// release leaves it, and once it expired (an exclusive grant took the key)
// both report ErrLost.
func TestShareExtendAndReleaseOwnShareOnly(t *testing.T) {
	l := sharedLock(t)
	ctx := t.Context()
	key := testKey(t)
	// short's first ttl is long enough that nothing but the other share's
	// release can touch it before its Extend (a 100 ms one ran out on a
	// loaded machine); the Extend then makes it short.
	short := share(t, l, key, time.Minute)
	long := share(t, l, key, time.Minute)
	if err := long.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := short.Extend(ctx, 150*time.Millisecond); err != nil {
		t.Fatalf("Extend after another share's release: %v", err)
	}
	// It expires; the key is then free for a writer, whose token is above.
	w, err := lock.Acquire(ctx, l, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if w.Token() <= long.Token() {
		t.Fatalf("writer token %d, last share %d", w.Token(), long.Token())
	}
	if err := short.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of an expired share: %v, want ErrLost", err)
	}
	if err := short.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release of an expired share: %v, want ErrLost", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("the writer's grant after the share's calls: %v", err)
	}
}

// A refused exclusive attempt refuses new shares for lock.IntentTTL (the
// intent's remaining time is the hint), and the last share's release lets
// the writer in.
func TestWriterIntentRefusesShares(t *testing.T) {
	l := sharedLock(t)
	ctx := t.Context()
	key := testKey(t)
	s := share(t, l, key, time.Minute)
	_, err := l.TryAcquire(ctx, key, time.Minute)
	wantRefused(t, "TryAcquire beside a share", err, time.Minute)
	_, err = l.TryAcquireShared(ctx, key, time.Minute)
	wantRefused(t, "TryAcquireShared while a writer wants the key", err, lock.IntentTTL)
	// The share still extends, and its release frees the key.
	if err := s.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := l.Inspect(ctx, key); ok {
		t.Fatal("the key is held after its last share's release")
	}
	mustAcquire(t, l, key, time.Minute)
}

// A writer is not starved by readers whose shares always overlap (each
// reader takes a new share before it gives up its last): whether it waits
// in the queue (lock.Acquire) or tries again and again (without a queue),
// new shares are refused and the writer is granted once the shares drain.
func TestWriterNotStarvedByReaders(t *testing.T) {
	for _, how := range []string{"queued", "looping"} {
		t.Run(how, func(t *testing.T) {
			l := sharedLock(t)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			key := testKey(t)
			var last lock.Handle = share(t, l, key, time.Minute)
			readersDone := make(chan int)
			go func() { // the readers: a chain of overlapping shares
				n := 0
				defer func() { readersDone <- n }()
				for ctx.Err() == nil {
					next, err := l.TryAcquireShared(ctx, key, time.Minute)
					if err != nil {
						break // refused: a writer waits
					}
					n++
					_ = last.Release(ctx)
					last = next
				}
				_ = last.Release(ctx)
			}()
			var w lock.Handle
			var err error
			if how == "queued" {
				w, err = lock.Acquire(ctx, l, key, time.Minute)
			} else {
				w, err = backendkit.AcquireWith(ctx, l, []string{key}, func(ctx context.Context) (lock.Handle, error) {
					return l.TryAcquire(ctx, key, time.Minute)
				})
			}
			n := <-readersDone
			if err != nil {
				t.Fatalf("the writer after %d shares: %v", n, err)
			}
			if w.Token() <= last.Token() {
				t.Fatalf("writer token %d after share %d", w.Token(), last.Token())
			}
		})
	}
}

// A share's expiry frees the key within its ttl: an exclusive Acquire
// (queued) gets it without any release.
func TestShareExpiryFreesTheKey(t *testing.T) {
	l := sharedLock(t)
	key := testKey(t)
	s := share(t, l, key, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	w, err := lock.Acquire(ctx, l, key, time.Minute)
	if err != nil {
		t.Fatalf("Acquire after a share that expires: %v", err)
	}
	if w.Token() <= s.Token() {
		t.Fatalf("writer token %d after share %d", w.Token(), s.Token())
	}
}

// A reader waiting for an exclusive holder (AcquireShared) is woken by its
// release; ForceRelease removes every share.
func TestAcquireSharedWakesOnRelease(t *testing.T) {
	l := sharedLock(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	key := testKey(t)
	ex := mustAcquire(t, l, key, time.Hour)
	got := make(chan error, 1)
	var s lock.Handle
	go func() {
		var err error
		s, err = lock.AcquireShared(ctx, l, key, time.Minute)
		got <- err
	}()
	if err := ex.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("AcquireShared after the exclusive release: %v", err)
	}
	share(t, l, key, time.Minute)
	if ok, err := l.ForceRelease(ctx, key); !ok || err != nil {
		t.Fatalf("ForceRelease of shares = %v %v", ok, err)
	}
	if err := s.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of a share after ForceRelease: %v, want ErrLost", err)
	}
	mustAcquire(t, l, key, time.Minute)
}

// testKey is a key of the test's own, fresh for each run (-count).
func testKey(t *testing.T) string { return "shared/" + t.Name() + "/" + lock.NewOwner() }

// A share's and a group's acquire and release sent twice (the first reply
// lost, the command retried by the client) do what the first did: the
// acquire returns the grant it made and makes no second share (one left
// behind would hold writers off until its ttl), the release reports
// success.
func TestSharedAndGroupRetriedByTheClient(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	hook := &replayHook{}
	c.AddHook(hook)
	l := newLock(t, c)
	ctx := t.Context()
	key := testKey(t)
	keys := []string{key + "/{g}/a", key + "/{g}/b"}
	replayed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s retried after it took effect: %v", what, err)
		}
		if hook.armed.Load() {
			t.Fatalf("the hook did not replay %s", what)
		}
	}
	for i := range 2 { // the first time loads the scripts
		other := share(t, l, key, time.Minute) // the retry must not take this one for its own
		hook.armed.Store(i == 1)
		h, err := l.TryAcquireShared(ctx, key, time.Minute)
		if i == 1 {
			replayed("TryAcquireShared", err)
		}
		gs, err := l.List(ctx, key)
		if err != nil || len(gs) != 2 {
			t.Fatalf("shares after a retried TryAcquireShared: %+v %v, want 2", gs, err)
		}
		if gs[0].Token != h.Token() && gs[1].Token != h.Token() {
			t.Fatalf("shares %+v, none with the returned token %d", gs, h.Token())
		}
		hook.armed.Store(i == 1)
		err = h.Release(ctx)
		if i == 1 {
			replayed("a share's Release", err)
		}
		_ = other.Release(ctx)

		hook.armed.Store(i == 1)
		g, err := l.TryAcquireAll(ctx, keys, time.Minute)
		if i == 1 {
			replayed("TryAcquireAll", err)
		}
		hook.armed.Store(i == 1)
		err = g.Release(ctx)
		if i == 1 {
			replayed("a group's Release", err)
		}
		if gs, _ := l.List(ctx, key); len(gs) != 0 {
			t.Fatalf("held after the releases: %+v", gs)
		}
	}
}
