package redislock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
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
