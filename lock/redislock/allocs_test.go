package redislock_test

import (
	"context"
	"testing"
	"time"

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

// The allocations of a handoff and of a contended grant (a waiter's
// attempts and waits, the release subscription's messages) depend on
// timing: a wait that must sleep makes a timer, a message that arrives
// while a waiter sleeps is read by the listener. Tests bounded them (62
// and 34) until 2026-11-29, when runs of -count=3 beside other packages
// found them over their bounds one run in a few (63 and 64, 34.1), at
// the commit before that day's changes too (61 to 62, 33.7 to 34.0). They
// are measured, not asserted: BenchmarkRedisHandoff (allocs/op) and
// BenchmarkRedisContended (allocs/grant), about 62 and 34 on that day.
