package pglock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// TryAcquireAll takes every key or none: each key has its own token,
// recorded for Inspect with the group; a conflict names a held key with
// the longest remaining ttl and leaves the free keys free; Extend and
// Release act on the whole group.
func TestGroup(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := ctxFor(t, 30*time.Second)
	a, b := newLock(t, srv.DSN()), newLock(t, srv.DSN())
	p := "group/" + lock.NewOwner() + "/"
	keys := []string{p + "c", p + "a", p + "b"}
	g, err := a.TryAcquireAll(ctx, keys, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	toks := g.Tokens()
	if fmt.Sprint(g.Keys()) != fmt.Sprint(keys) || len(toks) != 3 || toks[0] == toks[1] || toks[1] == toks[2] || toks[0] == toks[2] {
		t.Fatalf("Keys %v, Tokens %v", g.Keys(), toks)
	}
	var group string
	for i, k := range keys {
		gr, ok, err := b.Inspect(ctx, k)
		if err != nil || !ok || gr.Token != toks[i] || gr.Group == "" || gr.Shared || gr.Owner != a.Owner() {
			t.Fatalf("Inspect(%s) = %+v, %v, %v; want token %d in a group", k, gr, ok, err, toks[i])
		}
		if group == "" {
			group = gr.Group
		} else if gr.Group != group {
			t.Fatalf("key %s in group %q, the first in %q", k, gr.Group, group)
		}
	}
	if list, err := b.List(ctx, p); err != nil || len(list) != 3 || list[0].Group != group {
		t.Fatalf("List = %+v, %v", list, err)
	}

	_, err = b.TryAcquireShared(ctx, keys[2], time.Second)
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a share of a group's key: %v, want ErrNotAcquired", err)
	}
	short, err := b.TryAcquire(ctx, p+"d", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.TryAcquireAll(ctx, []string{p + "e", p + "d", p + "a"}, time.Second)
	var na *lock.NotAcquiredError
	if !errors.As(err, &na) || (na.Key != p+"a" && na.Key != p+"d") || na.Remaining <= 10*time.Second {
		t.Fatalf("an overlapping group: %v, want ErrNotAcquired naming a held key, with the longest remaining ttl", err)
	}
	if e, err := b.TryAcquire(ctx, p+"e", time.Second); err != nil {
		t.Fatalf("the free key of a refused group is held: %v", err)
	} else if err := e.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := short.Release(ctx); err != nil {
		t.Fatal(err)
	}

	if err := g.Extend(ctx, 40*time.Second); err != nil {
		t.Fatal(err)
	}
	if gr, _, _ := b.Inspect(ctx, keys[1]); gr.Remaining <= 30*time.Second {
		t.Fatalf("after Extend(40s): %+v", gr)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("second Release: %v, want ErrLost", err)
	}
	if list, err := b.List(ctx, p); err != nil || len(list) != 0 {
		t.Fatalf("after Release, List = %+v, %v", list, err)
	}
	g2, err := b.TryAcquireAll(ctx, keys[:2], time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Release(ctx)
	for i, tok := range g2.Tokens() {
		if tok <= max(toks[0], toks[1], toks[2]) {
			t.Fatalf("key %s: token %d after the earlier group's %v", keys[i], tok, toks)
		}
	}
	if _, err := a.TryAcquireAll(ctx, make([]string, pglock.MaxGroupKeys+1), time.Second); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("more than MaxGroupKeys: %v", err)
	}
}

// Groups over overlapping random sets of keys, waiting with AcquireAll:
// no key is ever held by two at once (each holder marks its keys), and
// every waiter finishes.
func TestGroupsUnderContention(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := ctxFor(t, 60*time.Second)
	p := "group-contention/" + lock.NewOwner() + "/"
	const workers, rounds, nkeys = 6, 15, 6
	var (
		mu     sync.Mutex
		holder = map[string]int{}
		wg     sync.WaitGroup
	)
	for w := range workers {
		l := newLock(t, srv.DSN())
		wg.Go(func() {
			for range rounds {
				perm := rand.Perm(nkeys)[:2+rand.N(3)]
				keys := make([]string, len(perm))
				for i, k := range perm {
					keys[i] = p + strconv.Itoa(k)
				}
				g, err := lock.AcquireAll(ctx, l, keys, 10*time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, k := range keys {
					if o, held := holder[k]; held {
						t.Errorf("key %s: worker %d got it while worker %d holds it", k, w, o)
					}
					holder[k] = w
				}
				mu.Unlock()
				// Hold the keys over a round trip, which sees the group.
				if gr, ok, err := l.Inspect(ctx, keys[0]); err != nil || !ok || gr.Group == "" {
					t.Errorf("Inspect of a held group's key: %+v, %v, %v", gr, ok, err)
				}
				mu.Lock()
				for _, k := range keys {
					delete(holder, k)
				}
				mu.Unlock()
				if err := g.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// Two AcquireAll waiters whose sets overlap, each waiting for a key the
// other set lacks, both finish once the holders release.
func TestOverlappingGroupWaiters(t *testing.T) {
	srv := testenv.Postgres(t)
	ctx := ctxFor(t, 30*time.Second)
	h := newLock(t, srv.DSN())
	p := "group-waiters/" + lock.NewOwner() + "/"
	ha, err := h.TryAcquire(ctx, p+"a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	hd, err := h.TryAcquire(ctx, p+"d", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan lock.Group, 2)
	for _, keys := range [][]string{{p + "a", p + "b", p + "c"}, {p + "b", p + "c", p + "d"}} {
		l := newLock(t, srv.DSN())
		go func() {
			g, err := lock.AcquireAll(ctx, l, keys, time.Minute)
			if err != nil {
				t.Error(err)
			}
			done <- g
		}()
	}
	for _, r := range []lock.Handle{hd, ha} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		g := <-done
		if g == nil {
			t.FailNow()
		}
		if err := g.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The rows a group leaves in leasehold_group_keys when its session ends
// without a Release are deleted by later releases, and never show in
// Inspect meanwhile.
func TestGroupRowsOfEndedSessions(t *testing.T) {
	srv := testenv.NewPostgres(t)
	ctx := ctxFor(t, 30*time.Second)
	admin := connect(t, srv.DSN())
	l := newLock(t, srv.DSN())
	rows := func() (n int) {
		t.Helper()
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM leasehold_group_keys").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 3 {
		g, err := l.TryAcquireAll(ctx, []string{fmt.Sprint("ended/", i, "/a"), fmt.Sprint("ended/", i, "/b")}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_locks
			WHERE locktype = 'advisory' AND objsubid = 1 AND ((classid::int8 << 32) | objid::int8) = $1`,
			pglock.ID(pglock.DefaultNamespace, g.Keys()[0])); err != nil {
			t.Fatal(err)
		}
		if err := g.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Release of a terminated group: %v, want ErrLost", err)
		}
	}
	if n := rows(); n != 6 {
		t.Fatalf("%d rows left by ended sessions, want 6", n)
	}
	if _, ok, err := l.Inspect(ctx, "ended/0/a"); err != nil || ok {
		t.Fatalf("Inspect of an ended group's key: %v, %v", ok, err)
	}
	g, err := l.TryAcquireAll(ctx, []string{"ended/x", "ended/y"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 0 {
		t.Fatalf("%d rows after a release, want 0", n)
	}
}
