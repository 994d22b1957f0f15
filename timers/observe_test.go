package timers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/timers"
)

// TestObserve: while a scheduler on one instance runs a tick, Observe on
// another instance of the same backend sees the claim (tick, host, token)
// and the run in progress (slot, runner); after the run the claim stays
// and the run is gone.
func TestObserve(t *testing.T) {
	backends.Each(t, backends.All(t), func(t *testing.T, b backends.Backend) {
		l, observer := b.New(t), b.New(t)
		// A name of its own per run: the claim of the tick outlives the test
		// on a shared server, and a second run (-count 2) would find it.
		name := fmt.Sprintf("observe-%s-%d", b.Name, time.Now().UnixNano())
		// An hourly timer whose clock is 100 ms before its next tick:
		// exactly one tick happens during the test.
		const interval = time.Hour
		now := time.Now()
		offset := now.Truncate(interval).Add(interval - 100*time.Millisecond).Sub(now)
		s := testkit.Must(timers.New(l, timers.WithClock(func() time.Time { return time.Now().Add(offset) }), timers.WithShutdownTimeout(5*time.Second)))
		started, finish := make(chan timers.Tick, 1), make(chan struct{})
		fn := func(ctx context.Context) error {
			tick, _ := timers.TickFrom(ctx)
			started <- tick
			<-finish
			return nil
		}
		if err := s.Add(timers.Every(name, interval, fn, timers.WithTTL(5*time.Second))); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		runDone := make(chan error, 1)
		go func() { runDone <- s.Run(ctx) }()
		var tick timers.Tick
		select {
		case tick = <-started:
		case <-ctx.Done():
			t.Fatal("the tick did not run")
		}
		obs, err := timers.Observe(ctx, observer, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(obs) != 1 {
			t.Fatalf("Observe = %+v, want one timer", obs)
		}
		o := obs[0]
		identity := l.(lock.Owned).Owner()
		if o.Name != name || !o.LastTick.Equal(tick.At) || o.ClaimedBy != identity || o.ClaimToken != tick.Claim {
			t.Fatalf("observed %+v, want tick %v claimed by %s with token %d", o, tick.At, identity, tick.Claim)
		}
		if len(o.Running) != 1 || o.Running[0].Slot != tick.Slot || o.Running[0].Runner != identity || o.Running[0].Remaining <= 0 {
			t.Fatalf("running %+v, want slot %d run by %s", o.Running, tick.Slot, identity)
		}
		close(finish)
		// The slot is released when the run ends; the claim stays.
		for {
			obs, err := timers.Observe(ctx, observer, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(obs) == 1 && len(obs[0].Running) == 0 {
				if !obs[0].LastTick.Equal(tick.At) {
					t.Fatalf("after the run: %+v, want the claim of %v", obs[0], tick.At)
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the run is still observed after it ended: %+v", obs)
			case <-time.After(20 * time.Millisecond):
			}
		}
		cancel()
		if err := <-runDone; err != nil {
			t.Fatal(err)
		}
	})
}

func TestObserveNeedsAnInspector(t *testing.T) {
	var l lock.Lock = onlyLock{}
	if _, err := timers.Observe(t.Context(), l, ""); err == nil {
		t.Fatal("Observe on a backend without Inspector: no error")
	}
}

type onlyLock struct{}

func (onlyLock) TryAcquire(context.Context, string, time.Duration) (lock.Handle, error) {
	return nil, lock.ErrNotAcquired
}
