package lock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// probed records the keys a probe asks a backend for.
type probed struct {
	lock.Lock
	mu       sync.Mutex
	acquired []string
}

func (p *probed) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	p.mu.Lock()
	p.acquired = append(p.acquired, key)
	p.mu.Unlock()
	return p.Lock.TryAcquire(ctx, key, ttl)
}

// inspected is probed that is also an Inspector.
type inspected struct {
	*probed
	in lock.Inspector
}

func (i inspected) Inspect(ctx context.Context, key string) (lock.Grant, bool, error) {
	return i.in.Inspect(ctx, key)
}

func (i inspected) List(ctx context.Context, prefix string) ([]lock.Grant, error) {
	return i.in.List(ctx, prefix)
}

// HealthCheck leaves nothing behind however often it runs: on an Inspector
// it only reads (no grant is taken, so no key row, fence counter or
// revision is written); on another backend it probes one fixed key, not a
// new one each time (which made pglock's key table and Redis's fence
// counters grow with every probe).
func TestHealthCheckLeavesNothingBehind(t *testing.T) {
	const probes = 5
	ctx := t.Context()
	t.Run("Inspector", func(t *testing.T) {
		m := testkit.Must(memlock.New())
		p := inspected{&probed{Lock: m}, m}
		for range probes {
			if _, err := lock.HealthCheck(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if len(p.acquired) != 0 {
			t.Fatalf("%d probes of an Inspector took grants on %q; they should only read", probes, p.acquired)
		}
	})
	t.Run("NotAnInspector", func(t *testing.T) {
		m := testkit.Must(memlock.New())
		p := &probed{Lock: m}
		for range probes {
			if _, err := lock.HealthCheck(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		if len(p.acquired) != probes {
			t.Fatalf("%d probes made %d attempts, want one each", probes, len(p.acquired))
		}
		for _, k := range p.acquired {
			if k != p.acquired[0] {
				t.Fatalf("the probes used keys %q; one fixed key leaves nothing behind", p.acquired)
			}
		}
		if gs, err := m.List(ctx, ""); err != nil || len(gs) != 0 {
			t.Fatalf("grants left after the probes: %v, %v", gs, err)
		}
	})
	t.Run("ProbeKeyHeld", func(t *testing.T) {
		// Two probes at once on a backend that is not an Inspector: the
		// second finds the key held, which is an answer, so healthy.
		m := testkit.Must(memlock.New())
		p := &probed{Lock: m}
		if _, err := lock.HealthCheck(ctx, p); err != nil {
			t.Fatal(err)
		}
		h, err := testkit.Must(m.Share()).TryAcquire(ctx, p.acquired[0], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		if _, err := lock.HealthCheck(ctx, p); err != nil {
			t.Fatalf("HealthCheck with the probe key held elsewhere: %v, want healthy", err)
		}
	})
}
