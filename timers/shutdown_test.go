package timers_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

// afterClaims is a memlock that calls after once its ClaimEach is made.
type afterClaims struct {
	*memlock.Lock
	after func(reqs []lock.ClaimRequest, res []lock.ClaimResult)
}

func (c *afterClaims) ClaimEach(ctx context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	res := c.Lock.ClaimEach(ctx, reqs)
	c.after(reqs, res)
	return res
}

// Host A claims a tick, and its Run's context ends right then (a rolling
// restart): A still runs the tick, within its shutdown timeout, since its
// claim tells host B the tick is taken. A's slot call was cut short by
// the end of its context, so the tick ran nowhere.
func TestShutdownAfterAClaimRunsItsTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch.Add(500 * time.Millisecond)))
		m := testkit.Must(memlock.New())
		tick := epoch.Add(time.Second)
		ctxA, cancelA := context.WithCancel(t.Context())
		defer cancelA()
		hook := &afterClaims{Lock: m, after: func(reqs []lock.ClaimRequest, res []lock.ClaimResult) {
			if len(res) == 1 && res[0].Err == nil && strings.Contains(reqs[0].Key, "/tick/") {
				cancelA() // A shuts down just as its claim landed
			}
		}}
		// A's clock is 100 ms ahead: it reaches the tick first.
		sa := testkit.Must(timers.New(hook, timers.WithClock(func() time.Time { return time.Now().Add(100 * time.Millisecond) })))
		sb := testkit.Must(timers.New(m))
		var mu sync.Mutex
		ran := map[int64]int{} // by tick, Unix ms
		fn := func(ctx context.Context) error {
			tk, _ := timers.TickFrom(ctx)
			mu.Lock()
			ran[tk.At.UnixMilli()]++
			mu.Unlock()
			return nil
		}
		for _, s := range []*timers.Scheduler{sa, sb} {
			if err := s.Add(timers.Every("handover", time.Second, fn)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := sa.Run(ctxA); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() { runFor(t, sb, 2200*time.Millisecond) }) // to 2.7 s
		wg.Wait()
		if len(ran) != 2 || ran[tick.UnixMilli()] != 1 || ran[tick.Add(time.Second).UnixMilli()] != 1 {
			t.Fatalf("runs by tick %v: want the tick of 1 s once (A's, which claimed it as it shut down) and that of 2 s once (B's)", ran)
		}
		if st := sb.Status()[0]; st.Elsewhere != 1 {
			t.Fatalf("B: %+v, want the tick of 1 s found claimed elsewhere", st)
		}
	})
}

// afterSlots is a memlock that calls after once its slots are taken.
type afterSlots struct {
	*memlock.Lock
	after func()
}

func (h *afterSlots) TryAcquireAnyEach(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
	res := h.Lock.TryAcquireAnyEach(ctx, reqs)
	h.after()
	return res
}

// Run's context ends while an instant's slot call is in flight, and the
// call succeeds: the instant's runs start at once, each on a goroutine of
// its own. The dispatcher had returned, so none started those its
// goroutine held back: the second run waited behind the first, which
// blocks until the shutdown timeout, and then ran on a slot lease that
// had expired long before.
func TestRunsOfAnInstantAtShutdownStartAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(epoch.Add(500 * time.Millisecond)))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var once sync.Once
		hook := &afterSlots{Lock: testkit.Must(memlock.New())}
		hook.after = func() {
			once.Do(func() {
				cancel()
				synctest.Wait() // the dispatcher has returned
			})
		}
		s := testkit.Must(timers.New(hook, timers.WithShutdownTimeout(10*time.Second)))
		var started atomic.Int32
		var second time.Time
		for _, name := range []string{"a", "b"} {
			if err := s.Add(timers.Every(name, time.Second, func(ctx context.Context) error {
				if started.Add(1) == 2 {
					second = time.Now()
					return nil
				}
				<-ctx.Done() // a long job, which ends with the shutdown timeout
				return ctx.Err()
			})); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if tick := epoch.Add(time.Second); second.IsZero() || second.Sub(tick) > time.Second {
			t.Fatalf("the second run of the instant started %v after its tick: it waited behind the first", second.Sub(tick))
		}
	})
}
