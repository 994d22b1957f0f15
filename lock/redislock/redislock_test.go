package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

func TestMain(m *testing.M) {
	locktest.HolderMain(func() (lock.Lock, error) {
		return redislock.New(redis.NewClient(&redis.Options{Addr: os.Getenv("LEASEHOLD_REDIS_ADDR")}))
	})
	testenv.Main(m)
}

// newLock returns a Lock with its own client on addr, closed at the end.
func newLock(t testing.TB, client redis.UniversalClient, opts ...redislock.Option) *redislock.Lock {
	t.Helper()
	l, err := redislock.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	srv := testenv.Redis(t)
	locktest.Run(t, func(t testing.TB) lock.Lock { return newLock(t, newClient(t, srv.Addr())) })
}

func TestProcessFaults(t *testing.T) {
	srv := testenv.Redis(t)
	locktest.RunProcessFaults(t, func(t testing.TB) lock.Lock { return newLock(t, newClient(t, srv.Addr())) }, srv.Env())
}

func TestScriptFlush(t *testing.T) {
	srv := testenv.Redis(t)
	c := newClient(t, srv.Addr())
	l := newLock(t, c)
	ctx := t.Context()
	key := "scriptflush/" + t.Name()
	h, err := l.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	flush := func() {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	if err := h.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	flush()
	if g, ok, err := l.Inspect(ctx, key); err != nil || !ok || g.Token != h.Token() {
		t.Fatalf("Inspect after SCRIPT FLUSH: %+v %v %v", g, ok, err)
	}
	flush()
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
	flush()
	h2, err := l.TryAcquireAny(ctx, []string{key}, time.Minute)
	if err != nil {
		t.Fatalf("TryAcquireAny after SCRIPT FLUSH: %v", err)
	}
	flush()
	if _, err := l.ForceRelease(ctx, key); err != nil {
		t.Fatalf("ForceRelease after SCRIPT FLUSH: %v", err)
	}
	if h2.Token() <= h.Token() {
		t.Fatalf("token %d after %d", h2.Token(), h.Token())
	}
}

// A restart without persistence loses every grant and fence counter: the
// holder must learn it lost the key, and tokens must still grow.
func TestRestartWithoutPersistence(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := newClient(t, srv.Addr())
	l := newLock(t, c)
	ctx := t.Context()
	ttl := 3 * time.Second
	h, err := l.TryAcquire(ctx, "restart", ttl)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := lock.Keep(ctx, h, ttl)
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	if err := h.Extend(ctx, ttl); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend after the server lost its data: %v, want ErrLost", err)
	}
	select {
	case <-lease.Context().Done():
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("lease ended with %v, want ErrLost", context.Cause(lease.Context()))
		}
	case <-time.After(ttl + time.Second):
		t.Fatal("Keep's context not cancelled within ttl + 1 s of the restart")
	}
	h2, err := newLock(t, newClient(t, srv.Addr())).TryAcquire(ctx, "restart", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Token() <= h.Token() {
		t.Fatalf("token after the restart %d, want > %d", h2.Token(), h.Token())
	}
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("the old lease's Release: %v, want ErrLost", err)
	}
	if err := h2.Extend(ctx, ttl); err != nil {
		t.Fatalf("the new grant after the old Release: %v", err)
	}
}

func TestTokensSurviveFlushAll(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := newClient(t, srv.Addr())
	l := newLock(t, c)
	ctx := t.Context()
	var last uint64
	for range 3 {
		h, err := l.TryAcquire(ctx, "flush", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if h.Token() <= last {
			t.Fatalf("token %d after %d", h.Token(), last)
		}
		last = h.Token()
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// The release subscription's connection is killed: waiters are woken to
// try again, and releases after the reconnect still wake them.
func TestWaiterSurvivesASubscriptionCut(t *testing.T) {
	srv := testenv.Redis(t)
	c := newClient(t, srv.Addr())
	holder, waiter := newLock(t, c), newLock(t, newClient(t, srv.Addr()))
	ctx := t.Context()
	key := "cut/" + t.Name()
	h, err := holder.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := waiter.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sub.Wait(wctx, time.Hour); err != nil {
		t.Fatalf("waiter not woken after its subscription was cut: %v", err)
	}
	// After the reconnect a release wakes a blocked Acquire again.
	got := make(chan error, 1)
	go func() {
		hw, err := lock.Acquire(wctx, waiter, key, time.Minute)
		if err == nil {
			_ = hw.Release(context.Background())
		}
		got <- err
	}()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire after the reconnect (ttl 1 min): %v", err)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := redislock.New(nil); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("New(nil): %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	if _, err := redislock.New(c, redislock.WithPrefix("a{b}")); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("prefix with braces: %v", err)
	}
	// "|" separates a queued waiter's fields, its inbox (named after the
	// prefix) among them: with "app|locks:", every handoff made the key
	// over to an owner no one is, for the waiter's ttl.
	if _, err := redislock.New(c, redislock.WithPrefix("app|locks:")); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("prefix with a \"|\": %v", err)
	}
	if _, err := redislock.New(c, nil); !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "redislock: invalid argument: ") {
		t.Errorf("nil option: %v", err)
	}
	if _, err := redislock.New(c, redislock.WithCommon(lock.Common{Owner: "bad\nowner"})); !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "redislock: invalid argument: ") {
		t.Errorf("invalid owner: %v", err)
	}
	l := newLock(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.TryAcquire(ctx, "k", time.Second)
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("unreachable server: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second+500*time.Millisecond {
		t.Errorf("unreachable server answered after %v, past the 2 s deadline", d)
	}
	if _, err := l.TryAcquire(ctx, strings.Repeat("k", lock.MaxKeyLen+1), time.Second); !errors.Is(err, lock.ErrInvalidKey) {
		t.Errorf("oversized key: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "k", time.Millisecond); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("ttl below the minimum: %v", err)
	}
	if _, err := l.Subscribe(ctx, "k"); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Subscribe on an unreachable server: %v", err)
	}
}

func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The whole suite on a three-master Redis Cluster: scripts with a lock key
// and its fence counter in one slot, TryAcquireAny over keys sharing a tag,
// release notifications across nodes, listing every master.
func TestConformanceCluster(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Members(3))
	locktest.Run(t, func(t testing.TB) lock.Lock { return newLock(t, newClusterClient(t, srv.Endpoints())) })
}

// Keys spread over the cluster's slots, and a lock key always shares its
// slot with its fence counter, whatever braces the user's key has.
func TestClusterSlots(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Members(3))
	c := newClusterClient(t, srv.Endpoints())
	l := newLock(t, c)
	ctx := t.Context()
	for _, key := range []string{"plain", "with{tag}inside", "{}empty", "}{odd", "a}b", "sem/{reports}/slot/3", "x", "{x}"} {
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		g, ok, err := l.Inspect(ctx, key)
		if err != nil || !ok || g.Token != h.Token() {
			t.Fatalf("Inspect(%q) = %+v %v %v", key, g, ok, err)
		}
	}
	grants, err := l.List(ctx, "")
	if err != nil || len(grants) != 8 {
		t.Fatalf("List over the cluster: %d grants, %v", len(grants), err)
	}
	// "x" and "{x}" are distinct keys.
	if grants, _ := l.List(ctx, "x"); len(grants) != 1 {
		t.Fatalf("List(x) = %+v", grants)
	}
	var used atomic.Int32
	_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		if n, _ := m.DBSize(ctx).Result(); n > 0 {
			used.Add(1)
		}
		return nil
	})
	if used.Load() < 2 {
		t.Fatalf("all keys landed on %d master(s): the test does not exercise the cluster", used.Load())
	}
	// Keys without a common tag cannot be tried in one script on a cluster.
	if _, err := l.TryAcquireAny(ctx, []string{"spread/a", "spread/b", "spread/c", "spread/d"}, time.Minute); !errors.Is(err, lock.ErrInvalidKey) {
		t.Fatalf("TryAcquireAny over slots: %v, want ErrInvalidKey", err)
	}
}

// replayHook runs the next EVAL/EVALSHA twice, as go-redis does when the
// reply of the first attempt is lost and it retries the command.
type replayHook struct{ armed atomic.Bool }

func (r *replayHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *replayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (r *replayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && r.armed.CompareAndSwap(true, false) {
			_ = next(ctx, cmd) // the attempt whose reply was lost
		}
		return next(ctx, cmd)
	}
}

// A Release sent twice (the first reply lost, the command retried by the
// client) reports success, not a loss: chaos seed 317498 saw ErrLost for a
// release that had taken effect. A grant really lost still reports ErrLost.
func TestReleaseRetriedByTheClient(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	hook := &replayHook{}
	c.AddHook(hook)
	l := newLock(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := "retried/" + t.Name()

	for range 2 { // the second time, the release script is loaded: EVALSHA runs it
		h, err := l.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h, err := l.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release retried after it took effect: %v, want nil", err)
	}
	if hook.armed.Load() {
		t.Fatal("the hook did not replay the release")
	}

	// Lost: an operator evicted the grant; another took it, or not.
	for _, retaken := range []bool{false, true} {
		h, err := l.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.ForceRelease(ctx, key); err != nil {
			t.Fatal(err)
		}
		if retaken {
			h2, err := l.TryAcquire(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer h2.Release(ctx)
		}
		if err := h.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Release of a force-released grant (retaken %v): %v, want ErrLost", retaken, err)
		}
	}
}

// An acquire sent twice (the first reply lost, the command retried by the
// client) returns the grant the first attempt made, instead of reporting
// the key held and leaving that grant behind until its ttl; with several
// keys it takes no second one.
func TestAcquireRetriedByTheClient(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	hook := &replayHook{}
	c.AddHook(hook)
	l := newLock(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := []string{"{retried-acquire}/a", "{retried-acquire}/b", "{retried-acquire}/c"}
	// Load the script, so that the replayed EVALSHA runs it both times.
	h, err := l.TryAcquire(ctx, keys[0], time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, multi := range []bool{false, true} {
		hook.armed.Store(true)
		if multi {
			h, err = l.TryAcquireAny(ctx, keys, time.Minute)
		} else {
			h, err = l.TryAcquire(ctx, keys[0], time.Minute)
		}
		if err != nil {
			t.Fatalf("multi %v: acquire retried after it took effect: %v, want the grant", multi, err)
		}
		if hook.armed.Load() {
			t.Fatal("the hook did not replay the acquire")
		}
		held, err := l.List(ctx, "{retried-acquire}/")
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 1 || held[0].Key != h.Key() || held[0].Token != h.Token() || held[0].Owner != l.Owner() {
			t.Fatalf("multi %v: held after a retried acquire: %+v, want only %q token %d", multi, held, h.Key(), h.Token())
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// List walks the keyspace scanCount (200) slots a SCAN call: over a
// thousand grants under the prefix among a thousand others it reads every
// page, and reports each grant under the prefix once.
func TestListReadsEveryPage(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		l := newLock(t, c)
		ctx := t.Context()
		id := runID(t)
		reqs := make([]lock.ClaimRequest, 0, 2000)
		for i := range 1000 {
			reqs = append(reqs,
				lock.ClaimRequest{Key: fmt.Sprintf("%s/in/%d", id, i), TTL: time.Minute},
				lock.ClaimRequest{Key: fmt.Sprintf("%s/out/%d", id, i), TTL: time.Minute})
		}
		for _, r := range l.ClaimEach(ctx, reqs) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		grants, err := l.List(ctx, id+"/in/")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, g := range grants {
			if !strings.HasPrefix(g.Key, id+"/in/") || seen[g.Key] {
				t.Fatalf("List reported %q (twice: %v)", g.Key, seen[g.Key])
			}
			seen[g.Key] = true
		}
		if len(seen) != 1000 {
			t.Fatalf("List found %d of the 1,000 grants under the prefix", len(seen))
		}
	})
}
