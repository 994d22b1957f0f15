package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock/locktest"
)

// eachImpl runs f as a sub-benchmark backend/library for every impl that
// keep accepts.
func eachImpl(b *testing.B, keep func(impl) bool, f func(b *testing.B, im impl)) {
	for _, im := range impls(b) {
		if keep(im) {
			b.Run(im.backend+"/"+im.name, func(b *testing.B) { f(b, im) })
		}
	}
}

// waits keeps the impls that can wait for a held key.
func waits(im impl) bool { return !im.floor }

// instanceOf makes an instance of any impl, leasehold included.
func instanceOf(b *testing.B, im impl) instance {
	if im.lease != nil {
		return leaseInstance(im.lease(b))
	}
	return im.new(b)
}

// BenchmarkUncontended: one TryAcquire + Release on a key nobody else
// wants: two round trips for every library, so the differences are the
// work each does per round trip. leasehold runs lock/locktest's shared
// benchmark, the same one its packages run.
func BenchmarkUncontended(b *testing.B) {
	eachImpl(b, func(im impl) bool { return !im.waitOnly }, func(b *testing.B, im impl) {
		if im.lease != nil {
			locktest.BenchTryAcquireRelease(b, im.lease(b))
			return
		}
		in := im.new(b)
		ctx := context.Background()
		key := uniqueKey("bench/uncontended")
		b.ReportAllocs()
		for b.Loop() {
			rel, err := in.try(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := rel(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkContended: 16 workers, each with its own instance (client,
// session, connection), take and release one key in a loop for 10 s
// (1 s under -short), waiting the library's way. Reports ops/s,
// min-share: the least productive worker's count over a fair share
// (total/16), and B/grant and allocs/grant: what the process allocated
// during the run (runtime.MemStats) over the grants. Run with -benchtime
// 1x; ns/op, B/op and allocs/op are the whole run.
func BenchmarkContended(b *testing.B) {
	const workers = 16
	d := workload(10*time.Second, time.Second)
	eachImpl(b, waits, func(b *testing.B, im impl) {
		ins := make([]instance, workers)
		for i := range ins {
			ins[i] = instanceOf(b, im)
		}
		key := uniqueKey("bench/contended")
		var total, least int64
		var before, after runtime.MemStats
		for b.Loop() {
			runtime.ReadMemStats(&before)
			ctx, cancel := context.WithTimeout(context.Background(), d)
			counts := make([]int64, workers)
			var wg sync.WaitGroup
			for i, in := range ins {
				wg.Go(func() {
					for ctx.Err() == nil {
						rel, err := in.wait(ctx, key, nil)
						switch {
						case err == nil:
						case ctx.Err() != nil || errors.Is(err, errBusy):
							continue // the run ended, or the library gave up: try again
						default:
							b.Error(err)
							return
						}
						if ctx.Err() == nil {
							counts[i]++
						}
						if err := rel(context.Background()); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			runtime.ReadMemStats(&after)
			cancel()
			total, least = 0, counts[0]
			for _, n := range counts {
				total += n
				least = min(least, n)
			}
		}
		b.ReportMetric(float64(total)/d.Seconds(), "ops/s")
		b.ReportMetric(float64(least)/(float64(total)/workers), "min-share")
		// The client-side cost of a grant: everything the process allocated
		// during the run (all 16 workers, their waiting and their clients'
		// background work) over the grants.
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(total), "B/grant")
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(total), "allocs/grant")
	})
}

// BenchmarkHandoff: the time from a Release to a waiter blocked the
// library's way holding the key, p50 and p99 in µs. Each round, the waiter
// (another instance) starts waiting; once its first attempt has failed the
// holder releases, after a random pause of up to 100 ms, so that a
// library that polls is caught at a random point of its period (for
// bsm/redislock's 100 ms backoff the expected p50 is then 50 ms).
// Notification-driven waiting does not depend on the pause: leasehold
// runs lock/locktest.BenchHandoff, which releases at once and otherwise does
// the same with lock.Acquire. Run with a fixed count (-benchtime 50x); the
// ns/op is the round.
func BenchmarkHandoff(b *testing.B) {
	eachImpl(b, waits, func(b *testing.B, im impl) {
		if im.lease != nil {
			locktest.BenchHandoff(b, im.lease(b), im.lease(b))
			return
		}
		holder, waiter := im.new(b), im.new(b)
		ctx := context.Background()
		key := uniqueKey("bench/handoff")
		type grant struct {
			at  time.Time
			rel release
			err error
		}
		var lat []time.Duration
		for b.Loop() {
			rel, err := holder.try(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			blocked := make(chan struct{})
			var once sync.Once
			got := make(chan grant, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				r, err := waiter.wait(wctx, key, func() { once.Do(func() { close(blocked) }) })
				got <- grant{time.Now(), r, err}
			}()
			var g grant
			select {
			case <-blocked:
			case g = <-got:
				b.Fatalf("the waiter returned before it waited: %v", g.err)
			}
			// Release at a random moment of the waiter's poll period, not
			// right after its failed attempt (the worst case for a poller).
			<-time.After(rand.N(100 * time.Millisecond))
			released := time.Now()
			if err := rel(ctx); err != nil {
				b.Fatal(err)
			}
			if g = <-got; g.err != nil {
				b.Fatal(g.err)
			}
			lat = append(lat, g.at.Sub(released))
			if err := g.rel(ctx); err != nil {
				b.Fatal(err)
			}
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
	})
}
