package pgjobs_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
)

// BenchmarkTrack: Registry.Track of new job IDs, each into a table of its
// own that holds the b.N jobs tracked (a small one): one at a time
// (serial: Track's latency) and from 16 goroutines at once over the pool's
// connections (parallel: Tracks of one registry must not wait for each
// other).
//
//	go test -run '^$' -bench BenchmarkTrack -count 10 ./jobs/pgjobs/ | tee new.txt; benchstat old.txt new.txt
func BenchmarkTrack(b *testing.B) {
	pool := newPool(b)
	ctx := context.Background()
	setup := func(b *testing.B) func() error {
		r, _ := newRegistry(b, pool, "track")
		if err := r.Setup(ctx); err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		return func() error {
			_, err := r.Track(ctx, jobs.Job{ID: "job-" + strconv.FormatInt(n.Add(1), 10), Owner: "w"}, time.Minute)
			return err
		}
	}
	b.Run("serial", func(b *testing.B) {
		track := setup(b)
		for b.Loop() {
			if err := track(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		track := setup(b)
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := track(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
