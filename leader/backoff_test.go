package leader_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// timing is the election timing of the tests under synctest.
var timing = []leader.Option{leader.WithTTL(15 * time.Second), leader.WithRenewInterval(5 * time.Second), leader.WithRetryInterval(2 * time.Second)}

const retryEvery = 2 * time.Second

// After fn returns an error, the next campaign comes exactly one retry
// interval after the term ended.
func TestRetryAfterFnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var starts, ends []time.Time
		_ = leader.Run(ctx, testkit.Must(memlock.New()), "fnerr", func(ctx context.Context) error {
			starts = append(starts, time.Now())
			if len(starts) == 3 {
				cancel()
				return nil
			}
			time.Sleep(time.Second) // work
			ends = append(ends, time.Now())
			return errors.New("boom")
		}, timing...)
		if len(starts) != 3 {
			t.Fatalf("%d terms, want 3", len(starts))
		}
		for i, end := range ends {
			if d := starts[i+1].Sub(end); d != retryEvery {
				t.Fatalf("term %d began %v after term %d's fn failed, want the retry interval %v", i+2, d, i+1, retryEvery)
			}
		}
	})
}

// flaky is a backend that is unavailable while down, and records when it
// is tried.
type flaky struct {
	*memlock.Lock
	mu       sync.Mutex
	down     bool
	attempts []time.Time
}

func (f *flaky) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	f.mu.Lock()
	f.attempts = append(f.attempts, time.Now())
	down := f.down
	f.mu.Unlock()
	if down {
		return nil, backendkit.Unavailable("acquire", errors.New("connection refused"))
	}
	return f.Lock.TryAcquire(ctx, key, ttl)
}

// While the backend is unavailable, a candidate retries with a backoff
// that grows to the retry interval and never waits longer; once the
// backend is back, it is elected within a retry interval.
func TestRetryWhileUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &flaky{Lock: testkit.Must(memlock.New()), down: true}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		elected := make(chan time.Time, 1)
		go func() {
			_ = leader.Run(ctx, l, "flaky", func(ctx context.Context) error {
				elected <- time.Now()
				<-ctx.Done()
				return nil
			}, timing...)
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		l.mu.Lock()
		attempts := l.attempts
		l.down = false
		l.mu.Unlock()
		back := time.Now()
		for i := 1; i < len(attempts); i++ {
			gap := attempts[i].Sub(attempts[i-1])
			if gap > retryEvery {
				t.Fatalf("attempt %d came %v after the previous one, more than the retry interval %v", i, gap, retryEvery)
			}
			if i >= 8 && gap < retryEvery/2 {
				t.Fatalf("attempt %d came %v after the previous one: the backoff did not grow to the retry interval", i, gap)
			}
		}
		// 50 ms to 2 s doubling: ~6 s of growth, then one every 1 to 2 s.
		if n := len(attempts); n < 30 || n > 70 {
			t.Fatalf("%d attempts in a minute of outage", n)
		}
		if d := (<-elected).Sub(back); d > retryEvery {
			t.Fatalf("elected %v after the backend came back, more than the retry interval", d)
		}
	})
}

// noWaiter hides every capability of a backend but TryAcquire.
type noWaiter struct{ l lock.Lock }

func (n noWaiter) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return n.l.TryAcquire(ctx, key, ttl)
}

// deaf is a Waiter that loses every notification (a dropped pub/sub
// connection): its subscriptions only time out.
type deaf struct{ *memlock.Lock }

func (deaf) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	return deafSubscription{}, nil
}

type deafSubscription struct{}

func (deafSubscription) Wait(ctx context.Context, hint time.Duration) error {
	return backendkit.Sleep(ctx, hint)
}
func (deafSubscription) Close() error { return nil }

// A follower that hears of no release — its backend has no Waiter, or
// every notification is lost — still tries at least every retry interval:
// after the leader resigns, it leads within one retry interval although
// the lease had at least 10 s left.
func TestFollowerWithoutNotifications(t *testing.T) {
	for name, follower := range map[string]func(*memlock.Lock) lock.Lock{
		"no Waiter":          func(l *memlock.Lock) lock.Lock { return noWaiter{l} },
		"lost notifications": func(l *memlock.Lock) lock.Lock { return deaf{l} },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				table := testkit.Must(memlock.New())
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				aCtx, resign := context.WithCancel(ctx)
				elected := make(chan time.Time, 2)
				run := func(ctx context.Context, l lock.Lock) {
					_ = leader.Run(ctx, l, "deaf", func(ctx context.Context) error {
						elected <- time.Now()
						<-ctx.Done()
						return nil
					}, timing...)
				}
				go run(aCtx, testkit.Must(table.Share()))
				<-elected
				go run(ctx, follower(testkit.Must(table.Share())))
				time.Sleep(20 * time.Second) // the leader renews; the follower waits
				synctest.Wait()
				resign()
				resigned := time.Now()
				if d := (<-elected).Sub(resigned); d > retryEvery {
					t.Fatalf("the follower led %v after the resign, more than the retry interval %v", d, retryEvery)
				}
			})
		})
	}
}
