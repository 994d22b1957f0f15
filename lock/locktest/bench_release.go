package locktest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// BenchKeeperRelease measures how a lock.Keeper of l gives n leases up, as
// two sub-benchmarks whose op is all n releases: Close (the Keeper's Close
// releases them) and Release (n goroutines each call their Lease's Release
// at once). The leases are taken before the timer starts. It reports
// releases/s and, when roundTrips is not nil (a counter of the backend's
// round trips, read before and after each op), round-trips/op.
func BenchKeeperRelease(b *testing.B, l lock.Lock, n int, roundTrips func() int64) {
	ctx := context.Background()
	prefix := "locktest/keeper-release/" + randomID() + "/"
	setup := func(b *testing.B, round int) (*lock.Keeper, []*lock.Lease) {
		b.StopTimer()
		defer b.StartTimer()
		k, err := lock.NewKeeper(l, 30*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		ls := make([]*lock.Lease, n)
		for i := range ls {
			if ls[i], err = k.TryAcquire(ctx, fmt.Sprintf("%s%d/%d", prefix, round, i)); err != nil {
				b.Fatal(err)
			}
		}
		return k, ls
	}
	var trips int64
	count := func(sign int64) {
		if roundTrips != nil {
			trips += sign * roundTrips()
		}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "releases/s")
		if roundTrips != nil {
			b.ReportMetric(float64(trips)/float64(b.N), "round-trips/op")
		}
		trips = 0
	}
	b.Run(fmt.Sprintf("Close/%d", n), func(b *testing.B) {
		round := 0
		for b.Loop() {
			k, _ := setup(b, round)
			round++
			count(-1)
			if err := k.Close(ctx); err != nil {
				b.Fatal(err)
			}
			count(1)
		}
		report(b)
	})
	b.Run(fmt.Sprintf("Release/%d", n), func(b *testing.B) {
		round := 0
		for b.Loop() {
			k, ls := setup(b, round)
			round++
			count(-1)
			var wg sync.WaitGroup
			for _, le := range ls {
				wg.Go(func() {
					if err := le.Release(ctx); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			count(1)
			b.StopTimer()
			_ = k.Close(ctx)
			b.StartTimer()
		}
		report(b)
	})
}
