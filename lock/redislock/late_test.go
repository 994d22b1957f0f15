package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// A share or a group whose reply arrives after its ttl is no grant (as
// chaos TestNoGrantArrivesDead shows for the exclusive acquires): the
// attempt fails with ErrUnavailable, and the keys are free again within
// the ttl and a second.
func TestNoShareOrGroupArrivesDead(t *testing.T) {
	p := faultproxy.Start(t, testenv.Redis(t).Addr())
	l := newLock(t, redis.NewClient(&redis.Options{Addr: p.Addr()}))
	plain := newLock(t, newClient(t, testenv.Redis(t).Addr()))
	const ttl = 500 * time.Millisecond
	key := testKey(t)
	keys := []string{key + "/{g}/a", key + "/{g}/b"}
	for _, o := range []struct {
		name string
		call func(ctx context.Context) (release func(context.Context) error, validUntil time.Time, err error)
	}{
		{"TryAcquireShared", func(ctx context.Context) (func(context.Context) error, time.Time, error) {
			h, err := l.TryAcquireShared(ctx, keys[0], ttl)
			if err != nil {
				return nil, time.Time{}, err
			}
			return h.Release, h.ValidUntil(), nil
		}},
		{"TryAcquireAll", func(ctx context.Context) (func(context.Context) error, time.Time, error) {
			g, err := l.TryAcquireAll(ctx, keys, ttl)
			if err != nil {
				return nil, time.Time{}, err
			}
			return g.Release, g.ValidUntil(), nil
		}},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		release, _, err := o.call(ctx) // on time: connections, scripts
		if err != nil {
			cancel()
			t.Fatalf("%s on time: %v", o.name, err)
		}
		_ = release(ctx)
		p.SetReplyDelay(ttl + 300*time.Millisecond)
		release, validUntil, err := o.call(ctx)
		returned := time.Now()
		p.SetReplyDelay(0)
		if err == nil {
			t.Errorf("%s whose reply came late returned a grant valid until %v before it returned", o.name, returned.Sub(validUntil))
			_ = release(ctx)
		} else if !errors.Is(err, lock.ErrUnavailable) {
			t.Errorf("%s whose reply came late: %v, want ErrUnavailable", o.name, err)
		}
		actx, acancel := context.WithTimeout(ctx, ttl+time.Second)
		g, err := lock.AcquireAll(actx, plain, keys, ttl)
		acancel()
		if err != nil {
			t.Fatalf("after %s's late grant, the keys were not free within ttl + 1 s: %v", o.name, err)
		}
		_ = g.Release(ctx)
		cancel()
	}
}
