package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

func groupKeys(t *testing.T, n int) []string {
	keys := make([]string, n)
	run := lock.NewOwner() // fresh for each run (-count)
	for i := range keys {
		keys[i] = fmt.Sprintf("group/%s/%s/{g}/%d", t.Name(), run, i)
	}
	return keys
}

// All or none: a held key refuses the whole set (naming it, with the
// longest remaining ttl) and nothing else is taken; a free set is taken
// whole, each key with its own token above its earlier ones, and its group
// shown by Inspect.
func TestTryAcquireAllOrNone(t *testing.T) {
	l := sharedLock(t)
	ctx := t.Context()
	keys := groupKeys(t, 3)
	held := mustAcquire(t, l, keys[1], time.Minute)
	short := mustAcquire(t, l, keys[2], time.Second)
	_, err := l.TryAcquireAll(ctx, keys, time.Minute)
	var na *lock.NotAcquiredError
	if !errors.As(err, &na) || na.Key != keys[1] || na.Remaining <= time.Second || na.Remaining > time.Minute {
		t.Fatalf("TryAcquireAll over held keys: %v, want ErrNotAcquired for %q with about a minute", err, keys[1])
	}
	if _, ok, _ := l.Inspect(ctx, keys[0]); ok {
		t.Fatal("a refused TryAcquireAll took a key")
	}
	_ = held.Release(ctx)
	_ = short.Release(ctx)
	g, err := l.TryAcquireAll(ctx, keys, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(g.Keys(), ",") != strings.Join(keys, ",") || len(g.Tokens()) != 3 {
		t.Fatalf("group keys %v tokens %v", g.Keys(), g.Tokens())
	}
	if g.Tokens()[1] <= held.Token() || g.Tokens()[2] <= short.Token() {
		t.Fatalf("group tokens %v after %d and %d", g.Tokens(), held.Token(), short.Token())
	}
	var id string
	for i, k := range keys {
		gr, ok, err := l.Inspect(ctx, k)
		if err != nil || !ok || gr.Token != g.Tokens()[i] || gr.Group == "" || gr.Shared {
			t.Fatalf("Inspect(%q) = %+v %v %v", k, gr, ok, err)
		}
		if id != "" && gr.Group != id {
			t.Fatalf("group ids %q and %q", id, gr.Group)
		}
		id = gr.Group
	}
	if _, err := l.TryAcquire(ctx, keys[0], time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a group's key: %v", err)
	}
	if err := g.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("second Release: %v, want ErrLost", err)
	}
	if err := g.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend after Release: %v, want ErrLost", err)
	}
	for _, k := range keys {
		mustAcquire(t, l, k, time.Minute)
	}
}

// A group that lost a key reports ErrLost on Extend (renewing the others)
// and on Release (releasing the others, never the newer holder's grant).
func TestGroupLosesAKey(t *testing.T) {
	l := sharedLock(t)
	ctx := t.Context()
	keys := groupKeys(t, 3)
	g, err := l.TryAcquireAll(ctx, keys, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := l.ForceRelease(ctx, keys[1]); !ok || err != nil {
		t.Fatal(ok, err)
	}
	other := mustAcquire(t, l, keys[1], time.Minute)
	if err := g.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of a group that lost a key: %v, want ErrLost", err)
	}
	if err := g.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release of a group that lost a key: %v, want ErrLost", err)
	}
	if gr, ok, _ := l.Inspect(ctx, keys[1]); !ok || gr.Token != other.Token() {
		t.Fatalf("the newer holder's grant after the group's release: %+v %v", gr, ok)
	}
	mustAcquire(t, l, keys[0], time.Minute)
	mustAcquire(t, l, keys[2], time.Minute)
}

// Shares refuse a group and the group's attempt marks the key as wanted by
// a writer; more keys than one script takes is invalid input.
func TestGroupAndShares(t *testing.T) {
	l := sharedLock(t)
	ctx := t.Context()
	keys := groupKeys(t, 2)
	s := share(t, l, keys[0], time.Minute)
	_, err := l.TryAcquireAll(ctx, keys, time.Minute)
	wantRefused(t, "TryAcquireAll beside a share", err, time.Minute)
	_, err = l.TryAcquireShared(ctx, keys[0], time.Minute)
	wantRefused(t, "TryAcquireShared after a group's attempt", err, lock.IntentTTL)
	_ = s.Release(ctx)
	g, err := l.TryAcquireAll(ctx, keys, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.Tokens()[0] <= s.Token() {
		t.Fatalf("group token %d after share %d", g.Tokens()[0], s.Token())
	}
	_, err = l.TryAcquireShared(ctx, keys[1], time.Minute)
	wantRefused(t, "TryAcquireShared of a group's key", err, time.Minute)

	many := make([]string, redislock.MaxGroupKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("many/%d", i)
	}
	if _, err := l.TryAcquireAll(ctx, many, time.Minute); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("TryAcquireAll of MaxGroupKeys+1 keys: %v, want ErrInvalidArgument", err)
	}
	if _, err := l.TryAcquireAll(ctx, []string{"a", "a"}, time.Minute); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("TryAcquireAll of a key twice: %v, want ErrInvalidArgument", err)
	}
}

// Under contention, AcquireAll over overlapping sets never lets two
// holders hold one key at once, and every caller finishes.
func TestAcquireAllUnderContention(t *testing.T) {
	l := sharedLock(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	keys := groupKeys(t, 4)
	var mu sync.Mutex
	holders := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		set := []string{keys[w%4], keys[(w+1)%4], keys[(w+2)%4]}
		wg.Go(func() {
			for range 10 {
				err := lock.DoAll(ctx, l, set, func(ctx context.Context, g lock.Group) error {
					mu.Lock()
					defer mu.Unlock()
					for _, k := range set {
						if holders[k]++; holders[k] > 1 {
							return fmt.Errorf("two holders of %q", k)
						}
					}
					for _, k := range set {
						holders[k]--
					}
					return nil
				}, lock.WithTTL(time.Minute))
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Every operation on shares and groups is one round trip.
func TestSharedAndGroupOneRoundTripEach(t *testing.T) {
	rec := &commands{}
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(rec)
	l := newLock(t, c)
	ctx := t.Context()
	// The connection is made (and its HELLO sent) before counting starts.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rec.take()
	check := func(op string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if got := strings.Join(rec.take(), " "); got != "EVALSHA" && got != "EVALSHA EVAL" {
			t.Errorf("%s sent [%s], want one EVALSHA", op, got)
		}
	}
	for range 2 {
		s, err := l.TryAcquireShared(ctx, testKey(t), time.Minute)
		check("TryAcquireShared", err)
		check("share's Extend", s.Extend(ctx, time.Minute))
		check("share's Release", s.Release(ctx))
		g, err := l.TryAcquireAll(ctx, groupKeys(t, 4), time.Minute)
		check("TryAcquireAll", err)
		check("group's Extend", g.Extend(ctx, time.Minute))
		check("group's Release", g.Release(ctx))
	}
}

// On Redis Cluster shares work on any key, and a group over keys that
// share a hash tag; a group over several slots is refused.
func TestSharedAndGroupOnCluster(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Members(3))
	l := newLock(t, newClusterClient(t, srv.Endpoints()))
	ctx := t.Context()
	for _, key := range []string{"plain", "with{tag}inside", "}{odd"} {
		a, err := l.TryAcquireShared(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.TryAcquireShared(ctx, key, time.Minute)
		if err != nil || b.Token() <= a.Token() {
			t.Fatalf("second share of %q: %v", key, err)
		}
		if _, err := l.TryAcquire(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire beside shares of %q: %v", key, err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	listed := testKey(t)
	s, err := l.TryAcquireShared(ctx, listed, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if gs, err := l.List(ctx, listed); err != nil || len(gs) != 1 || !gs[0].Shared || gs[0].Token != s.Token() {
		t.Fatalf("List over the cluster = %+v %v", gs, err)
	}
	g, err := l.TryAcquireAll(ctx, []string{"order/{o42}", "customer/{o42}/7"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquireAll(ctx, []string{"spread/a", "spread/b", "spread/c", "spread/d"}, time.Minute); !errors.Is(err, lock.ErrInvalidKey) {
		t.Fatalf("TryAcquireAll over slots: %v, want ErrInvalidKey", err)
	}
}
