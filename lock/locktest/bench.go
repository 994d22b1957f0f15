package locktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// BenchTryAcquireRelease measures one uncontended TryAcquire plus Release on
// l: the hot path of every backend. Each backend's benchmark calls it so
// that the numbers compare.
func BenchTryAcquireRelease(b *testing.B, l lock.Lock) {
	benchAcquireRelease(b, l.TryAcquire)
}

// BenchHandoff measures the handoff latency from a Release on holder to a
// goroutine blocked in lock.Acquire on waiter holding the key, and reports
// its p50 and p99 in µs (the ns/op includes the setup of each round). The
// holder releases only after the waiter's attempt has failed, so every
// round is a real wake-up. The ttl is long: a handoff that waits for expiry
// shows as seconds.
func BenchHandoff(b *testing.B, holder, waiter lock.Lock) {
	ctx := context.Background()
	key := "locktest/handoff/" + randomID()
	w, _ := waiter.(lock.Waiter)
	q, queued := holder.(lock.Queue)
	if _, ok := waiter.(lock.Queue); ok != queued {
		b.Fatalf("holder %T and waiter %T differ in lock.Queue", holder, waiter)
	}
	var lat []time.Duration
	for b.Loop() {
		h, err := holder.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		// The waiter blocks the way callers do: in the backend's queue when
		// it has one (then the holder sees it queued), else on its Waiter.
		var blocking lock.Lock = waiter
		ob := &observed{Lock: waiter, Waiter: w, failed: make(chan struct{})}
		if !queued {
			blocking = ob
		}
		got := make(chan time.Time, 1)
		go func() {
			hw, err := lock.Acquire(ctx, blocking, key, time.Minute)
			now := time.Now()
			if err != nil {
				b.Error(err)
				close(got)
				return
			}
			got <- now
			_ = hw.Release(ctx)
		}()
		if queued {
			WaitQueued(b, q, key, 1, time.Minute)
		} else {
			<-ob.failed
		}
		released := time.Now()
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		at, ok := <-got
		if !ok {
			b.FailNow()
		}
		lat = append(lat, at.Sub(released))
		// Wait until the waiter has released, so the next round starts clean.
		for {
			h, err := holder.TryAcquire(ctx, key, time.Minute)
			if err == nil {
				_ = h.Release(ctx)
				break
			}
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
}

// BenchHandoffProcess is BenchHandoff across processes: the waiter is a
// child process (see HolderMain) blocked in lock.Acquire, and the latency
// runs from the parent's Release to the child's grant, both read from the
// wall clock of the same machine. Every round starts a process, so run it
// with a fixed count (-benchtime 30x); the ns/op is the round, not the
// handoff.
func BenchHandoffProcess(b *testing.B, holder lock.Lock, env []string) {
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		key := "locktest/handoff-process/" + randomID()
		h, err := holder.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		child := StartBlockedHolder(b, append(env[:len(env):len(env)], warmEnv+"=1"), key, time.Minute)
		released := time.Now()
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, child.Acquired(time.Minute).Sub(released))
		if got := child.Release(); got != "ok" {
			b.Fatalf("child's Release: %s", got)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
}

// BenchSharedAcquireRelease measures one uncontended TryAcquireShared plus
// Release on l (sub-benchmark "shared"), and TryAcquire plus Release
// ("exclusive") for comparison.
func BenchSharedAcquireRelease(b *testing.B, l lock.SharedLock) {
	b.Run("shared", func(b *testing.B) { benchAcquireRelease(b, l.TryAcquireShared) })
	b.Run("exclusive", func(b *testing.B) { benchAcquireRelease(b, l.TryAcquire) })
}

func benchAcquireRelease(b *testing.B, try func(context.Context, string, time.Duration) (lock.Handle, error)) {
	ctx := context.Background()
	key := "locktest/bench/" + randomID()
	b.ReportAllocs()
	for b.Loop() {
		h, err := try(ctx, key, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchGroup measures taking n keys together: TryAcquireAll plus the
// group's Release (sub-benchmark "all-of"), against n sequential
// TryAcquire calls plus n Releases ("sequential"). The keys share a hash
// tag, as an all-of grant's must on Redis Cluster.
func BenchGroup(b *testing.B, l lock.GroupLock, n int) {
	ctx := context.Background()
	keys := make([]string, n)
	id := randomID()
	for i := range keys {
		keys[i] = fmt.Sprintf("locktest/bench/{%s}/%d", id, i)
	}
	b.Run("all-of", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			g, err := l.TryAcquireAll(ctx, keys, 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		hs := make([]lock.Handle, n)
		for b.Loop() {
			for i, k := range keys {
				h, err := l.TryAcquire(ctx, k, 30*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				hs[i] = h
			}
			for _, h := range hs {
				if err := h.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchReadersWriter runs readers that re-acquire one key shared back to
// back (AcquireShared, Release, again) and a writer that takes it
// exclusively (lock.Acquire, Release, again) for the length of the
// benchmark, each on its own instance. Run it with a fixed duration
// (-benchtime 10s); b.N counts the writer's grants. It reports
// reader-grants/s, writer-grants/s and the writer's longest wait
// (writer-max-wait-ms).
func BenchReadersWriter(b *testing.B, readers []lock.SharedLock, writer lock.SharedLock) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	key := "locktest/bench/rw/" + randomID()
	const ttl = 30 * time.Second
	var reads atomic.Int64
	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				h, err := lock.AcquireShared(ctx, r, key, ttl)
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				reads.Add(1)
				if err := h.Release(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	var longest time.Duration
	start := time.Now()
	writes := 0
	for b.Loop() {
		t0 := time.Now()
		h, err := lock.Acquire(ctx, writer, key, ttl)
		if err != nil {
			b.Fatal(err)
		}
		longest = max(longest, time.Since(t0))
		writes++
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start).Seconds()
	stop()
	wg.Wait()
	b.ReportMetric(float64(reads.Load())/elapsed, "reader-grants/s")
	b.ReportMetric(float64(writes)/elapsed, "writer-grants/s")
	b.ReportMetric(float64(longest)/float64(time.Millisecond), "writer-max-wait-ms")
}
