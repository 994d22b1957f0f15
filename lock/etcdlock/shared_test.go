package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

func mustShare(t testing.TB, ctx context.Context, l *etcdlock.Lock, key string, ttl time.Duration) lock.Handle {
	t.Helper()
	h, err := l.TryAcquireShared(ctx, key, ttl)
	if err != nil {
		t.Fatalf("TryAcquireShared(%q): %v", key, err)
	}
	return h
}

func wantRefused(t testing.TB, what string, err error) *lock.NotAcquiredError {
	t.Helper()
	var na *lock.NotAcquiredError
	if !errors.As(err, &na) {
		t.Fatalf("%s: %v; want a *lock.NotAcquiredError", what, err)
	}
	return na
}

// Shares of one key coexist, across Locks; each has its own token, larger
// than the one before; an exclusive attempt is refused while they hold the
// key; Inspect and List report them as shared.
func TestSharesCoexist(t *testing.T) {
	srv := testenv.Etcd(t)
	a, b := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, 10*time.Second)
	key := "shared/" + t.Name()
	h1 := mustShare(t, ctx, a, key, time.Minute)
	h2 := mustShare(t, ctx, a, key, 30*time.Second)
	h3 := mustShare(t, ctx, b, key, time.Minute)
	if !(h1.Token() < h2.Token() && h2.Token() < h3.Token()) {
		t.Fatalf("tokens %d, %d, %d; want increasing", h1.Token(), h2.Token(), h3.Token())
	}
	_, err := b.TryAcquire(ctx, key, time.Minute)
	if na := wantRefused(t, "TryAcquire beside shares", err); na.Remaining <= 0 {
		t.Fatalf("refused exclusive attempt: Remaining %v, want the shares' ttl", na.Remaining)
	}
	gs, err := b.List(ctx, key)
	if err != nil || len(gs) != 3 {
		t.Fatalf("List = %+v, %v; want the 3 shares", gs, err)
	}
	for _, g := range gs {
		if !g.Shared || g.Key != key || g.Group != "" {
			t.Fatalf("List: %+v; want a share of %q", g, key)
		}
	}
	g, ok, err := b.Inspect(ctx, key)
	if err != nil || !ok || !g.Shared || g.Token != h2.Token() {
		t.Fatalf("Inspect = %+v, %v, %v; want the share that expires first (token %d)", g, ok, err, h2.Token())
	}
	for _, h := range []lock.Handle{h1, h2, h3} {
		if err := h.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("Extend of a share: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("Release of a share: %v", err)
		}
		if err := h.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("second Release of a share: %v, want ErrLost", err)
		}
	}
	// The refused writer marked the key: a new reader waits for it (the
	// release of the last share wakes the writer, which takes the key).
	w, err := lock.Acquire(ctx, b, key, time.Minute)
	if err != nil {
		t.Fatalf("writer after the shares: %v", err)
	}
	if w.Token() <= h3.Token() {
		t.Fatalf("writer's token %d, want above every earlier share's (%d)", w.Token(), h3.Token())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An exclusive grant refuses shares, with its remaining ttl as the hint,
// and a share taken after it has a larger token.
func TestExclusiveExcludesShares(t *testing.T) {
	srv := testenv.Etcd(t)
	a, b := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, 10*time.Second)
	key := "shared/" + t.Name()
	w, err := a.TryAcquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquireShared(ctx, key, time.Minute)
	if na := wantRefused(t, "TryAcquireShared beside an exclusive grant", err); na.Remaining <= 0 || na.Remaining > 5*time.Second {
		t.Fatalf("Remaining %v, want the writer's ttl (5s)", na.Remaining)
	}
	if _, err := b.TryAcquire(ctx, key, time.Minute); err == nil {
		t.Fatal("a second exclusive grant")
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := mustShare(t, ctx, b, key, time.Minute)
	if r.Token() <= w.Token() {
		t.Fatalf("share's token %d after the writer's %d", r.Token(), w.Token())
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A refused exclusive attempt marks the key for IntentTTL (rounded up to
// the lease's whole seconds): new shares are refused meanwhile, and taken
// again once the mark expires, without the writer. A writer that gets the
// key removes its mark, so readers are not held off after its release.
func TestWriterIntent(t *testing.T) {
	srv := testenv.Etcd(t)
	reader, writer := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, 20*time.Second)
	key := "shared/" + t.Name()
	r1 := mustShare(t, ctx, reader, key, time.Minute)
	if _, err := writer.TryAcquire(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire beside a share: %v", err)
	}
	refused := time.Now()
	_, err := reader.TryAcquireShared(ctx, key, time.Minute)
	if na := wantRefused(t, "TryAcquireShared while a writer waits", err); na.Remaining <= 0 || na.Remaining > lock.IntentTTL {
		t.Fatalf("Remaining %v, want the intent's, at most %v", na.Remaining, lock.IntentTTL)
	}
	// The writer gave up: the mark expires with its lease (2 s, plus etcd's
	// expiry slack) and the waiting reader is woken by its deletion.
	r2, err := lock.AcquireShared(ctx, reader, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(refused); took > lock.IntentTTL+2*time.Second {
		t.Fatalf("readers held off %v after the writer's only attempt; want about IntentTTL (%v)", took, lock.IntentTTL)
	}
	// The writer waits, marking the key; once it has the key and releases
	// it, a reader gets a share at once, long before the mark would expire.
	got := make(chan lock.Handle, 1)
	go func() {
		w, err := lock.Acquire(ctx, writer, key, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	// The writer's first refused attempt marks the key; wait until it shows.
	waitIntent(t, ctx, srv.Endpoints(), key)
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w := <-got
	if w == nil {
		return
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, lock.IntentTTL/2)
	defer cancel()
	r3, err := lock.AcquireShared(quick, reader, key, time.Minute)
	if err != nil {
		t.Fatalf("a reader after the writer's release: %v; the writer's mark must go with its grant", err)
	}
	_ = r3.Release(ctx)
}

// waitIntent waits (on a watch) until key's intent key exists.
func waitIntent(t *testing.T, ctx context.Context, endpoints []string, key string) {
	t.Helper()
	c := newClient(t, endpoints)
	ikey := etcdlock.DefaultPrefix + key + "\x00\x01w"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.Watch(wctx, ikey, clientv3.WithCreatedNotify())
	<-wch // created
	if r, err := c.Get(ctx, ikey); err == nil && len(r.Kvs) > 0 {
		return
	}
	for resp := range wch {
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				return
			}
		}
	}
	t.Fatal("no intent key before the deadline")
}

// Continuous readers, whose shares always overlap, do not starve a writer
// that waits with lock.Acquire: its refused attempts stop new shares, the
// held ones drain, and it gets the key well within its deadline.
func TestReadersDoNotStarveWriter(t *testing.T) {
	srv := testenv.Etcd(t)
	ctx := ctxFor(t, 30*time.Second)
	key := "shared/" + t.Name()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	reads := 0
	for range 4 {
		l := newLock(t, srv.Endpoints())
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				h, err := lock.AcquireShared(ctx, l, key, 5*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				reads++
				mu.Unlock()
				select { // the reader's work: the shares overlap
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
				_ = h.Release(ctx)
			}
		})
	}
	w := newLock(t, srv.Endpoints())
	// The readers run before the writer comes.
	for {
		mu.Lock()
		n := reads
		mu.Unlock()
		if n >= 8 {
			break
		}
		sub, err := w.Subscribe(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Wait(ctx, 0); err != nil {
			t.Fatal("readers did not start")
		}
		_ = sub.Close()
	}
	wctx, cancel := context.WithTimeout(ctx, 4*lock.IntentTTL)
	defer cancel()
	h, err := lock.Acquire(wctx, w, key, 5*time.Second)
	close(stop)
	if err != nil {
		t.Fatalf("the writer was starved by the readers: %v", err)
	}
	_ = h.Release(ctx)
	wg.Wait()
}

// A share whose lease is revoked (its holder crashed, or an operator) frees
// the key and is reported lost: Lost closes, Extend and Release return
// ErrLost, and a writer gets the key.
func TestShareLeaseRevoked(t *testing.T) {
	srv := testenv.Etcd(t)
	c := newClient(t, srv.Endpoints())
	reader, writer := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, 10*time.Second)
	key := "shared/" + t.Name()
	h := mustShare(t, ctx, reader, key, time.Minute)
	lost := h.(lock.LossNotifier).Lost()
	r, err := c.Get(ctx, etcdlock.DefaultPrefix+key+"\x00", clientv3.WithPrefix())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the share's key: %v, %v", r, err)
	}
	if _, err := c.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("Lost not closed after the share's lease was revoked")
	}
	if err := h.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend: %v, want ErrLost", err)
	}
	if err := h.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release: %v, want ErrLost", err)
	}
	w, err := writer.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("writer after the share's revoke: %v", err)
	}
	if w.Token() <= h.Token() {
		t.Fatalf("writer's token %d, want above the share's %d", w.Token(), h.Token())
	}
	_ = w.Release(ctx)
}
