package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// A server that stops answering (stopped, partitioned, a blackholed
// connection) must not hold a call past its context: go-redis ignores
// contexts on reads and writes unless the client sets
// ContextTimeoutEnabled, and then waits its ReadTimeout (5 s here). Every
// operation must end within its deadline either way, and Keep's context
// must end at ValidUntil, not seconds later.
func TestStalledServerAnswersWithinTheDeadline(t *testing.T) {
	for _, honours := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			p := faultproxy.Start(t, testenv.Redis(t).Addr())
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: honours, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			l := newLock(t, c)
			ctx := t.Context()
			key := "stalled/" + t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36) // new per run: -count 2
			held, err := l.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			kept, err := l.TryAcquire(ctx, key+"/kept", 600*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			shared, err := l.TryAcquireShared(ctx, key+"/shared", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			group, err := l.TryAcquireAll(ctx, []string{key + "/{g}/a", key + "/{g}/b"}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			lease, err := lock.Keep(ctx, kept, 600*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lease.Release(context.Background()) }()

			lostAt := make(chan time.Time, 1)
			go func() {
				<-lease.Context().Done()
				lostAt <- time.Now()
			}()
			p.SetMode(faultproxy.Blackhole)
			defer p.SetMode(faultproxy.Pass)

			const slack = 300 * time.Millisecond
			faultproxy.ExpectWithinDeadline(t, 200*time.Millisecond, slack,
				faultproxy.Op{Name: "TryAcquire", Call: func(ctx context.Context) error { _, err := l.TryAcquire(ctx, key+"/other", time.Second); return err }},
				faultproxy.Op{Name: "TryAcquireAny", Call: func(ctx context.Context) error {
					_, err := l.TryAcquireAny(ctx, []string{key + "/a", key + "/b"}, time.Second)
					return err
				}},
				faultproxy.Op{Name: "AcquireQueued", Call: func(ctx context.Context) error { _, err := l.AcquireQueued(ctx, key, time.Second); return err }},
				faultproxy.Op{Name: "Extend", Call: func(ctx context.Context) error { return held.Extend(ctx, time.Minute) }},
				faultproxy.Op{Name: "Inspect", Call: func(ctx context.Context) error { _, _, err := l.Inspect(ctx, key); return err }},
				faultproxy.Op{Name: "List", Call: func(ctx context.Context) error { _, err := l.List(ctx, "stalled/"); return err }},
				faultproxy.Op{Name: "ForceRelease", Call: func(ctx context.Context) error { _, err := l.ForceRelease(ctx, key+"/other"); return err }},
				faultproxy.Op{Name: "Subscribe", Call: func(ctx context.Context) error {
					_, err := newLock(t, c).Subscribe(ctx, key)
					return err
				}},
				faultproxy.Op{Name: "Release", Call: func(ctx context.Context) error { return held.Release(ctx) }},
				faultproxy.Op{Name: "TryAcquireShared", Call: func(ctx context.Context) error {
					_, err := l.TryAcquireShared(ctx, key+"/shared", time.Second)
					return err
				}},
				faultproxy.Op{Name: "share's Extend", Call: func(ctx context.Context) error { return shared.Extend(ctx, time.Minute) }},
				faultproxy.Op{Name: "share's Release", Call: func(ctx context.Context) error { return shared.Release(ctx) }},
				faultproxy.Op{Name: "TryAcquireAll", Call: func(ctx context.Context) error {
					_, err := l.TryAcquireAll(ctx, []string{key + "/{g}/c", key + "/{g}/d"}, time.Second)
					return err
				}},
				faultproxy.Op{Name: "group's Extend", Call: func(ctx context.Context) error { return group.Extend(ctx, time.Minute) }},
				faultproxy.Op{Name: "group's Release", Call: func(ctx context.Context) error { return group.Release(ctx) }},
			)
			// The deadline may have passed already: then both channels
			// are ready and select picks either, so the loss is looked
			// for again after the timer.
			var at time.Time
			select {
			case at = <-lostAt:
			case <-time.After(time.Until(lease.ValidUntil()) + 2*time.Second):
				select {
				case at = <-lostAt:
				default:
				}
			}
			switch {
			case !at.IsZero():
				if late := at.Sub(lease.ValidUntil()); late > slack {
					t.Errorf("Keep's context ended %v after ValidUntil", late)
				}
				if !errors.Is(context.Cause(lease.Context()), lock.ErrLost) {
					t.Errorf("Keep's cause: %v, want ErrLost", context.Cause(lease.Context()))
				}
			default:
				t.Errorf("Keep's context still open 2 s after ValidUntil")
			}
		})
	}
}

// On a server that stops answering, a caller that opens a Lock's
// subscription holds it up for its own context only: another caller
// waiting for the same subscription (a Subscribe, an AcquireQueued) ends
// within its own. The first held the Lock's mutex through its round trip,
// and the others waited for it past their deadlines (2 s here, for 200 ms).
func TestStalledSubscribeHoldsNoOtherCallerPastItsContext(t *testing.T) {
	p := faultproxy.Start(t, testenv.Redis(t).Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l := newLock(t, c)
	p.SetMode(faultproxy.Blackhole)
	defer p.SetMode(faultproxy.Pass)
	before := p.Conns()
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := l.Subscribe(ctx, "stalled/subscribe")
		first <- err
	}()
	for p.Conns() == before { // the first caller is subscribing: its connection is open
		if err := backendkit.Sleep(t.Context(), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	faultproxy.ExpectWithinDeadline(t, 200*time.Millisecond, 300*time.Millisecond,
		faultproxy.Op{Name: "Subscribe", Call: func(ctx context.Context) error { _, err := l.Subscribe(ctx, "stalled/subscribe"); return err }},
		faultproxy.Op{Name: "AcquireQueued", Call: func(ctx context.Context) error {
			_, err := l.AcquireQueued(ctx, "stalled/subscribe", time.Second)
			return err
		}},
	)
	if err := <-first; !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("the first Subscribe: %v, want ErrUnavailable at its deadline", err)
	}
}
