package locktest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// BenchTryAcquireRelease measures one uncontended TryAcquire plus Release on
// l: the hot path of every backend. Each backend's benchmark calls it so
// that the numbers compare.
func BenchTryAcquireRelease(b *testing.B, l lock.Lock) {
	ctx := context.Background()
	key := "locktest/bench/" + randomID()
	b.ReportAllocs()
	for b.Loop() {
		h, err := l.TryAcquire(ctx, key, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
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
