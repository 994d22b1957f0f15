package redislock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// BenchmarkRenewBatch: one Renew of n grants on a single server (n/1,000
// scripts in one pipeline): time and allocations per Renew, and per
// handle. Keys share no tag (on a single server that does not matter).
func BenchmarkRenewBatch(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			l := newLock(b, newClient(b, testenv.Redis(b).Addr()))
			batch := newBatch(b, l, time.Minute)
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench/renew/%s/%d", runID(b), i)
			}
			hs := acquireAll(b, batch, keys)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				for _, err := range batch.Renew(ctx, hs) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(n)
			b.ReportMetric(per, "ns/handle")
			for _, h := range hs {
				_ = h.Release(ctx)
			}
		})
	}
}
