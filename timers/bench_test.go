package timers_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/backends"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/timers"
)

// counting counts the backend round trips a scheduler makes.
type counting struct {
	lock.Lock
	n atomic.Int64
}

func (c *counting) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	c.n.Add(1)
	h, err := c.Lock.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &countingHandle{h, c}, nil
}

func (c *counting) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	c.n.Add(1)
	h, err := c.Lock.(lock.MultiLock).TryAcquireAny(ctx, keys, ttl)
	if err != nil {
		return nil, err
	}
	return &countingHandle{h, c}, nil
}

func (c *counting) Claim(ctx context.Context, key string, ttl time.Duration) (uint64, error) {
	c.n.Add(1)
	return lock.Claim(ctx, c.Lock, key, ttl)
}

func (c *counting) List(ctx context.Context, prefix string) ([]lock.Grant, error) {
	c.n.Add(1)
	return c.Lock.(lock.Inspector).List(ctx, prefix)
}

func (c *counting) Inspect(ctx context.Context, key string) (lock.Grant, bool, error) {
	c.n.Add(1)
	return c.Lock.(lock.Inspector).Inspect(ctx, key)
}

type countingHandle struct {
	lock.Handle
	c *counting
}

func (h *countingHandle) Extend(ctx context.Context, ttl time.Duration) error {
	h.c.n.Add(1)
	return h.Handle.Extend(ctx, ttl)
}

func (h *countingHandle) Release(ctx context.Context) error {
	h.c.n.Add(1)
	return h.Handle.Release(ctx)
}

// BenchmarkTick runs one timer every 20 ms on Redis and PostgreSQL (etcd's
// one-second minimum ttl rules such intervals out there) and reports,
// per tick: the backend round trips, and how late fn starts after the tick
// instant (claim + slot). ns/op is the wall time per tick (the interval).
func BenchmarkTick(b *testing.B) {
	for _, kind := range []func(testing.TB) backends.Backend{backends.Redis, backends.Postgres} {
		be := kind(b)
		b.Run(be.Name, func(b *testing.B) {
			c := &counting{Lock: be.New(b)}
			s := timers.New(c)
			var mu sync.Mutex
			var lateness []time.Duration
			ran := make(chan struct{}, 1)
			want := b.N
			if err := s.Add(timers.Every("bench-"+uniq(), 20*time.Millisecond, func(ctx context.Context) error {
				tick, _ := timers.TickFrom(ctx)
				mu.Lock()
				lateness = append(lateness, time.Since(tick.At))
				if len(lateness) == want {
					ran <- struct{}{}
				}
				mu.Unlock()
				return nil
			})); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			b.ResetTimer()
			go func() { _ = s.Run(ctx); close(done) }()
			<-ran
			cancel()
			<-done
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			var sum time.Duration
			for _, l := range lateness {
				sum += l
			}
			b.ReportMetric(float64(c.n.Load())/float64(len(lateness)), "round-trips/tick")
			b.ReportMetric(float64(sum.Microseconds())/float64(len(lateness)), "start-latency-µs")
		})
	}
}

// BenchmarkThousandTimers: 1,000 timers ticking every second on one
// scheduler over memlock, for 3 s; reports the process CPU time per second
// of schedule. Run with -benchtime 1x.
func BenchmarkThousandTimers(b *testing.B) {
	for b.Loop() {
		s := timers.New(memlock.New())
		var runs atomic.Int64
		for i := range 1000 {
			if err := s.Add(timers.Every(fmt.Sprintf("t%d", i), time.Second, func(context.Context) error {
				runs.Add(1)
				return nil
			}, timers.SpreadStart())); err != nil {
				b.Fatal(err)
			}
		}
		before := cpu()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = s.Run(ctx)
		cancel()
		used := cpu() - before
		b.ReportMetric(float64(used.Milliseconds())/3, "cpu-ms/s")
		b.ReportMetric(float64(runs.Load())/3, "runs/s")
	}
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
