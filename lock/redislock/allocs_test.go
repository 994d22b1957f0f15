package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// TestAllocations bounds what the hot paths allocate on the client, as the
// runtime counts it, go-redis's own share included (3 to 6 per command on
// this version; the race detector adds none). The counts do not depend on
// timing; the bounds sit just above them, so that a change that builds per
// call what can be built once (keys, script arguments, contexts) fails
// here. Before the calls were built once, from pointers to the grant's own
// fields, TryAcquire+Release took 69 allocations (bsm/redislock 34),
// Extend 16, and 24 under a deadline.
func TestAllocations(t *testing.T) {
	key := "allocs/" + lock.NewOwner()
	// A context that never ends: the calls need no goroutine to end with
	// it (see internal/rediscall).
	ctx := context.Background()
	l := newLock(t, newClient(t, testenv.Redis(t).Addr()))
	held, err := l.TryAcquire(ctx, key+"/held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	for _, c := range []struct {
		name  string
		limit float64 // the most allocations per run
		op    func() error
	}{
		{"TryAcquire+Release", 19, func() error {
			h, err := l.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				return err
			}
			return h.Release(ctx)
		}},
		{"Extend", 5, func() error { return held.Extend(ctx, time.Minute) }},
		// As Keep renews: under a context that ends, on a client without
		// ContextTimeoutEnabled, the call runs on a goroutine of its own
		// (2 allocations; the context itself takes 5).
		{"Extend under a deadline", 13, func() error {
			ectx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			return held.Extend(ectx, time.Minute)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			got := testing.AllocsPerRun(200, func() {
				if e := c.op(); e != nil {
					err = e
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%.1f allocations per run (bound %.0f)", got, c.limit)
			if got > c.limit {
				t.Errorf("%s: %.1f allocations per run, want at most %.0f", c.name, got, c.limit)
			}
		})
	}
}

// afterScript signals on its channel each time a script call returns.
type afterScript chan struct{}

func (a afterScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a afterScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (a afterScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" {
			select {
			case a <- struct{}{}:
			default:
			}
		}
		return err
	}
}

// TestHandoffAllocations bounds the allocations of one handoff, both sides
// and the release subscription's listener included: a holder's TryAcquire
// and Release, and a waiter's AcquireQueued, whose attempt fails and queues
// it, handed the key by the Release, and its own Release. Before the
// waiter built its keys and grant once for all its attempts and the
// calls were built from pointers, 178; before Acquire skipped its
// non-recording span and the Notifier and Wait allocated less (see
// TestContendedAllocations), 64; now 60.
func TestHandoffAllocations(t *testing.T) {
	key := "allocs/handoff/" + lock.NewOwner()
	ctx := context.Background()
	srv := testenv.Redis(t)
	holder := newLock(t, newClient(t, srv.Addr()))
	c := newClient(t, srv.Addr())
	attempted := make(afterScript, 1)
	c.AddHook(attempted)
	waiter := newLock(t, c)
	var err error
	got := testing.AllocsPerRun(100, func() {
		h, e := holder.TryAcquire(ctx, key, time.Minute)
		if e != nil {
			err = e
			return
		}
		select { // the waiter's Release of the round before
		case <-attempted:
		default:
		}
		done := make(chan error, 1)
		go func() {
			hw, err := waiter.AcquireQueued(ctx, key, time.Minute)
			if err == nil {
				err = hw.Release(ctx)
			}
			done <- err
		}()
		<-attempted // the waiter's attempt failed: it is queued
		if e := h.Release(ctx); e != nil {
			err = e
		}
		if e := <-done; e != nil {
			err = e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 62
	t.Logf("%.1f allocations per handoff (bound %d)", got, limit)
	if got > limit {
		t.Errorf("%.1f allocations per handoff, want at most %d", got, limit)
	}
}

// TestContendedAllocations bounds the allocations per grant of 16 workers,
// each with a Lock of its own, taking one key in turn with lock.Acquire
// (BenchmarkRedisContended), the whole process counted: the attempts, the
// queue's waits, the handoffs, the release subscription's listeners and
// go-redis's own share (about 17). Before Acquire made no span without a
// tracer SDK and shared its default options, and the Notifier kept its
// subscriptions in lists instead of a map per key, a grant took 46
// allocations (2.8 KB); now 32 (2.1 KB), under the race detector too.
func TestContendedAllocations(t *testing.T) {
	bytes, allocs := contendedGrants(t, testenv.Redis(t).Addr(), 16, 1000)
	const limit = 34
	t.Logf("%.1f allocations, %.0f bytes per grant (bound %d allocations)", allocs, bytes, limit)
	if allocs > limit {
		t.Errorf("%.1f allocations per grant, want at most %d", allocs, limit)
	}
}
