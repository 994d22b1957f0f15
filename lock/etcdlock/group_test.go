package etcdlock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// A group takes every key or none: a held key, a share or a writer's
// intent on any of them refuses the whole set, naming the held key, with
// the holder's remaining ttl; once free, every key is granted with one
// token (larger than each key's earlier grants'), Inspect and List name the
// group, Extend keeps it (with the same or another ttl) and Release frees
// every key.
func TestGroupAllOrNone(t *testing.T) {
	srv := testenv.Etcd(t)
	a, b := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, 20*time.Second)
	p := "group/" + t.Name() + "/"
	keys := []string{p + "a", p + "b", p + "c"}
	held, err := b.TryAcquire(ctx, keys[1], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.TryAcquireAll(ctx, keys, time.Minute)
	if na := wantRefused(t, "TryAcquireAll over a held key", err); na.Key != keys[1] || na.Remaining <= 0 || na.Remaining > 5*time.Second {
		t.Fatalf("refusal %+v; want key %q and its holder's ttl", na, keys[1])
	}
	for _, k := range []string{keys[0], keys[2]} {
		if _, ok, err := b.Inspect(ctx, k); err != nil || ok {
			t.Fatalf("Inspect(%q) after a refused group = %v, %v: a partial grant", k, ok, err)
		}
	}
	_ = held.Release(ctx)
	share := mustShare(t, ctx, b, keys[2], time.Minute)
	if _, err := a.TryAcquireAll(ctx, keys, time.Minute); wantRefused(t, "TryAcquireAll over a share", err).Key != keys[2] {
		t.Fatalf("refusal %v; want key %q", err, keys[2])
	}
	if _, err := b.TryAcquire(ctx, keys[2], time.Minute); !errors.Is(err, lock.ErrNotAcquired) { // marks the writer's intent
		t.Fatal(err)
	}
	_ = share.Release(ctx)
	if _, err := a.TryAcquireAll(ctx, keys, time.Minute); wantRefused(t, "TryAcquireAll over a writer's intent", err).Key != keys[2] {
		t.Fatalf("refusal %v; want key %q", err, keys[2])
	}
	w, err := b.TryAcquire(ctx, keys[2], time.Minute) // the writer takes the key and drops its intent
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Release(ctx)
	g, err := lock.AcquireAll(ctx, a, keys, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range g.Tokens() {
		if tok != g.Tokens()[0] || tok <= w.Token() {
			t.Fatalf("tokens %v; want one revision, above the earlier grants' (%d)", g.Tokens(), w.Token())
		}
		if _, err := b.TryAcquireShared(ctx, keys[i], time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("share of %q beside the group: %v", keys[i], err)
		}
	}
	gs, err := b.List(ctx, p)
	if err != nil || len(gs) != 3 {
		t.Fatalf("List = %+v, %v; want the group's 3 grants", gs, err)
	}
	for i, gr := range gs {
		if gr.Key != keys[i] || gr.Group == "" || gr.Group != gs[0].Group || gr.Shared || gr.Token != g.Tokens()[i] {
			t.Fatalf("List[%d] = %+v; want key %q of one group", i, gr, keys[i])
		}
	}
	if err := g.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := g.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend with another ttl: %v", err)
	}
	if gr, ok, err := b.Inspect(ctx, keys[1]); err != nil || !ok || gr.Remaining > 10*time.Second || gr.Group != gs[0].Group {
		t.Fatalf("Inspect after Extend(10s) = %+v, %v, %v", gr, ok, err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := g.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("second Release: %v, want ErrLost", err)
	}
	if err := g.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend after Release: %v, want ErrLost", err)
	}
	if gs, err := b.List(ctx, p); err != nil || len(gs) != 0 {
		t.Fatalf("List after Release = %+v, %v", gs, err)
	}
	many := make([]string, etcdlock.MaxGroupKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("%smany/%d", p, i)
	}
	if _, err := a.TryAcquireAll(ctx, many, time.Minute); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("TryAcquireAll of %d keys: %v, want ErrInvalidArgument", len(many), err)
	}
	g, err = a.TryAcquireAll(ctx, many[:etcdlock.MaxGroupKeys], time.Minute)
	if err != nil {
		t.Fatalf("TryAcquireAll of MaxGroupKeys keys: %v", err)
	}
	_ = g.Release(ctx)
}

// Under contention (groups over random overlapping sets and single grants,
// from several Locks) no key is ever granted twice at once, which a partial
// group would show.
func TestGroupContention(t *testing.T) {
	srv := testenv.Etcd(t)
	ctx := ctxFor(t, 30*time.Second)
	p := "group/" + t.Name() + "/"
	const nKeys = 6
	var mu sync.Mutex
	holders := map[string]int{}
	claim := func(keys []string, d int) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			holders[k] += d
			if holders[k] > 1 {
				t.Errorf("key %q granted twice at once", k)
			}
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		l := newLock(t, srv.Endpoints())
		wg.Go(func() {
			for range 40 {
				keys := []string{}
				for _, i := range rand.Perm(nKeys)[:1+rand.N(3)] {
					keys = append(keys, fmt.Sprintf("%s%d", p, i))
				}
				if w == 0 && len(keys) == 1 {
					h, err := l.TryAcquire(ctx, keys[0], 5*time.Second)
					if err == nil {
						claim(keys, 1)
						claim(keys, -1)
						_ = h.Release(ctx)
					}
					continue
				}
				g, err := l.TryAcquireAll(ctx, keys, 5*time.Second)
				if errors.Is(err, lock.ErrNotAcquired) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				claim(keys, 1)
				claim(keys, -1)
				if err := g.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// Two AcquireAll waiters whose sets overlap both finish once the key they
// wait for is released: neither holds part of its set while it waits.
func TestGroupOverlappingWaiters(t *testing.T) {
	srv := testenv.Etcd(t)
	ctx := ctxFor(t, 20*time.Second)
	p := "group/" + t.Name() + "/"
	holder := newLock(t, srv.Endpoints())
	h, err := holder.TryAcquire(ctx, p+"b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for _, set := range [][]string{{p + "a", p + "b"}, {p + "b", p + "c"}} {
		l := newLock(t, srv.Endpoints())
		wg.Go(func() {
			started <- struct{}{}
			g, err := lock.AcquireAll(ctx, l, set, 5*time.Second)
			if err != nil {
				t.Errorf("AcquireAll(%v): %v", set, err)
				return
			}
			_ = g.Release(ctx)
		})
	}
	<-started
	<-started
	_ = h.Release(ctx)
	wg.Wait()
}
