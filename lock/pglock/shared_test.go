package pglock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// notAcquired fails the test unless err is ErrNotAcquired.
func notAcquired(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
	}
}

// Shares coexist, an exclusive grant excludes shares and shares exclude
// it; Inspect and List report the shares; every grant's token is larger
// than every earlier grant's, shared or exclusive.
func TestSharedGrants(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := ctxFor(t, 30*time.Second)
	a, b := newLock(t, srv.DSN()), newLock(t, srv.DSN())
	key := "shared/" + lock.NewOwner()
	r1, err := a.TryAcquireShared(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.TryAcquireShared(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("a second share: %v", err)
	}
	if r2.Token() <= r1.Token() {
		t.Fatalf("share tokens %d then %d", r1.Token(), r2.Token())
	}
	_, err = b.TryAcquire(ctx, key, time.Second)
	notAcquired(t, "exclusive beside shares", err)
	var na *lock.NotAcquiredError
	if !errors.As(err, &na) || na.Remaining <= 5*time.Second {
		t.Fatalf("exclusive beside shares: %v, want the shares' remaining ttl", err)
	}
	g, ok, err := b.Inspect(ctx, key)
	if err != nil || !ok || !g.Shared || g.Token != r2.Token() || g.Owner != b.Owner() {
		t.Fatalf("Inspect = %+v, %v, %v; want the share that expires first (token %d)", g, ok, err, r2.Token())
	}
	list, err := a.List(ctx, key)
	if err != nil || len(list) != 2 || !list[0].Shared || !list[1].Shared {
		t.Fatalf("List = %+v, %v; want both shares", list, err)
	}
	if err := r2.Extend(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if g, _, _ := b.Inspect(ctx, key); g.Token != r1.Token() {
		t.Fatalf("after extending the second share, Inspect = %+v, want the first (token %d)", g, r1.Token())
	}
	for _, h := range []lock.Handle{r1, r2} {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r1.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("second Release of a share: %v, want ErrLost", err)
	}
	w, err := b.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("exclusive after the shares' release: %v", err)
	}
	if w.Token() <= r2.Token() {
		t.Fatalf("writer's token %d after a reader's %d", w.Token(), r2.Token())
	}
	_, err = a.TryAcquireShared(ctx, key, time.Second)
	notAcquired(t, "share beside an exclusive grant", err)
	if g, _, _ := a.Inspect(ctx, key); g.Shared || g.Token != w.Token() {
		t.Fatalf("Inspect of the writer = %+v", g)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// (The refused exclusive attempt above holds readers off for
	// lock.IntentTTL: AcquireShared waits for that.)
	r3, err := lock.AcquireShared(ctx, a, key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Release(ctx)
	if r3.Token() <= w.Token() {
		t.Fatalf("reader's token %d after the writer's %d", r3.Token(), w.Token())
	}
}

// A writer waiting in the server's queue (lock.Acquire, AcquireQueued)
// makes pg_try_advisory_lock_shared fail: no new reader while it waits. It
// gets the key when the readers that hold it release, and its release
// wakes a reader waiting in lock.AcquireShared.
func TestQueuedWriterBlocksReaders(t *testing.T) {
	srv := testenv.NewPostgres(t)
	ctx := ctxFor(t, 30*time.Second)
	obs := connect(t, srv.DSN())
	readers, writer := newLock(t, srv.DSN()), newLock(t, srv.DSN())
	key := "writer-priority"
	r1, err := readers.TryAcquireShared(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan lock.Handle, 1)
	go func() {
		h, err := lock.Acquire(ctx, writer, key, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	waitingFor(t, ctx, obs, 1)
	for range 3 {
		_, err = readers.TryAcquireShared(ctx, key, time.Minute)
		notAcquired(t, "a reader while a writer waits", err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if w.Token() <= r1.Token() {
		t.Fatalf("writer's token %d after the reader's %d", w.Token(), r1.Token())
	}
	// A reader waits; the writer's release wakes it at once (its hint, the
	// writer's remaining minute, is far off).
	sub, err := readers.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Wait(ctx, 0); err != nil {
		t.Fatalf("the writer's release did not notify: %v", err)
	}
	r2, err := lock.AcquireShared(ctx, readers, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// And a share's release notifies a waiting writer's subscription.
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Wait(ctx, 0); err != nil {
		t.Fatalf("a share's release did not notify: %v", err)
	}
}

// A share whose holding session ends (terminated, or left idle past its
// ttl) frees the key: the waiting writer gets it, and the share's handle
// reports the loss.
func TestSharedHolderSessionEnds(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := ctxFor(t, 30*time.Second)
	admin := connect(t, srv.DSN())
	readers, writer := newLock(t, srv.DSN()), newLock(t, srv.DSN())
	key := "shared-session-ends/" + lock.NewOwner()
	r, err := readers.TryAcquireShared(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lost := r.(lock.LossNotifier).Lost()
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND mode = 'ShareLock'
		  AND ((classid::int8 << 32) | objid::int8) = $1`, pglock.ID(pglock.DefaultNamespace, key)); err != nil {
		t.Fatal(err)
	}
	w, err := lock.Acquire(ctx, writer, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-ctx.Done():
		t.Fatal("the terminated share's loss was not reported")
	}
	if err := r.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of the terminated share: %v, want ErrLost", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Left idle past its ttl: the key is free again within the ttl (and
	// the reaper's grace).
	const ttl = 300 * time.Millisecond
	r, err = readers.TryAcquireShared(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	w, err = lock.Acquire(ctx, writer, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if late := time.Since(r.ValidUntil()); late > time.Second {
		t.Fatalf("the writer got the key %v after the share's ValidUntil", late)
	}
}

// A refused exclusive TryAcquire (or TryAcquireAll) on a key held shared
// marks it as wanted by a writer: TryAcquireShared is refused for
// lock.IntentTTL after it, so the readers drain and the writer's next
// attempt wins. A refusal by an exclusive holder marks nothing.
func TestRefusedWriterHoldsReadersOff(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := ctxFor(t, 30*time.Second)
	readers, writer := newLock(t, srv.DSN()), newLock(t, srv.DSN())
	for _, via := range []string{"TryAcquire", "TryAcquireAll"} {
		key := "intent/" + via + "/" + lock.NewOwner()
		r, err := readers.TryAcquireShared(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if via == "TryAcquire" {
			_, err = writer.TryAcquire(ctx, key, time.Minute)
		} else {
			_, err = writer.TryAcquireAll(ctx, []string{key + "/other", key}, time.Minute)
		}
		notAcquired(t, via+" beside a share", err)
		_, err = readers.TryAcquireShared(ctx, key, time.Minute)
		var na *lock.NotAcquiredError
		if !errors.As(err, &na) || na.Remaining <= 0 || na.Remaining > lock.IntentTTL {
			t.Fatalf("%s: a new reader after a refused writer: %v, want ErrNotAcquired for at most IntentTTL", via, err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := writer.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("%s: the writer after the readers drained: %v", via, err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r, err = lock.AcquireShared(ctx, readers, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	key := "intent/exclusive/" + lock.NewOwner()
	h, err := writer.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = readers.TryAcquire(ctx, key, time.Minute)
	notAcquired(t, "TryAcquire beside an exclusive grant", err)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := readers.TryAcquireShared(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("a reader after a writer refused by a writer: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
