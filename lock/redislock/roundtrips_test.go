package redislock_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// commands records the name of every command a client sends.
type commands struct {
	mu    sync.Mutex
	names []string
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commands) add(cmd redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, strings.ToUpper(cmd.Name()))
}

// take returns the commands sent since the last take.
func (c *commands) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := c.names
	c.names = nil
	return names
}

// TestOneRoundTripEach: TryAcquire, TryAcquireAny, Extend and Release each
// send exactly one command, an EVALSHA. The one exception is the first run
// of a script the server does not have (after a restart or SCRIPT FLUSH):
// the server answers NOSCRIPT and go-redis sends the script with EVAL, one
// more round trip, once per script.
func TestOneRoundTripEach(t *testing.T) {
	rec := &commands{}
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(rec)
	l := newLock(t, c)
	ctx := t.Context()
	key := "roundtrips/" + lock.NewOwner()

	one := []string{"EVALSHA"}
	// fallback is what an operation sends when its script is not on the
	// server (TryAcquireAny runs TryAcquire's script, loaded by then).
	ops := func(t *testing.T, fallback []string) {
		t.Helper()
		check := func(op string, want []string) {
			t.Helper()
			got := strings.Join(rec.take(), " ")
			// On a server shared with other processes (LEASEHOLD_REDIS_ADDR)
			// one of them may have loaded the script again meanwhile.
			if got != strings.Join(want, " ") && got != strings.Join(one, " ") {
				t.Errorf("%s sent [%s], want %v", op, got, want)
			}
		}
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		check("TryAcquire", fallback)
		if err := h.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		check("Extend", fallback)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		check("Release", fallback)
		h, err = l.TryAcquireAny(ctx, []string{key + "/{s}/0", key + "/{s}/1"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		check("TryAcquireAny", one)
		_ = h.Release(ctx)
		rec.take()
	}

	// The connection is made (and its HELLO sent) before counting starts.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rec.take()
	t.Run("scripts unknown to the server", func(t *testing.T) { ops(t, []string{"EVALSHA", "EVAL"}) })
	t.Run("scripts loaded", func(t *testing.T) { ops(t, one) })
}

// TestServerCallsPerOp counts the commands that TryAcquire's and
// Release's scripts run on the server (INFO commandstats of a server of
// its own), as each costs about as much as the script's own overhead:
// TIME, the fence counter's GET and SET, and SET NX GET for the grant;
// GET and DEL for the release, EXISTS for the queue (empty) and PUBLISH
// for the waiters that subscribed. Before acquire.lua read the key with
// SET NX GET and handoff.lua looked at the clock and the queue only when
// someone waited, there were 10: MGET and a second TIME, and ZRANGE for
// EXISTS.
func TestServerCallsPerOp(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := newClient(t, srv.Addr())
	l := newLock(t, c)
	ctx := context.Background()
	const n = 50
	for i := range n + 1 {
		if i == 1 { // the first loads the scripts
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		h, err := l.TryAcquire(ctx, "calls", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "evalsha" || name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		k, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got[name] = k / n
		if k%n != 0 {
			t.Errorf("%s: %d calls in %d runs", name, k, n)
		}
	}
	want := map[string]int{"time": 1, "get": 2, "set": 2, "del": 1, "exists": 1, "publish": 1}
	if !maps.Equal(got, want) {
		t.Errorf("calls per TryAcquire+Release: %v, want %v", got, want)
	}
}

// TestKeyOfAnotherType: a lock key that another client made a list is
// held as far as redislock is concerned (not replaced, not an error), as
// acquire.lua's SET NX GET fails on it where SET NX did not.
func TestKeyOfAnotherType(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	l := newLock(t, c)
	ctx := context.Background()
	key := "wrongtype/" + lock.NewOwner()
	if err := c.RPush(ctx, redislock.DefaultPrefix+"lk:{"+key+"}", "x").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), redislock.DefaultPrefix+"lk:{"+key+"}") })
	if _, err := l.TryAcquire(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("got %v, want lock.ErrNotAcquired", err)
	}
}
