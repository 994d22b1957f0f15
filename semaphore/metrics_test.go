package semaphore_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/metrictest"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// Occupancy follows grants and releases (a second release of one permit
// counts once), TryAcquire on a full semaphore counts a rejection, and
// Acquire records how long it waited.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := metrictest.New()
		sem, err := semaphore.New(testkit.Must(memlock.New()), "m", 2, semaphore.WithCommon(lock.Common{MeterProvider: mp}))
		if err != nil {
			t.Fatal(err)
		}
		const (
			held       = "leasehold.semaphore.permits.held{leasehold.semaphore=m}"
			rejections = "leasehold.semaphore.rejections{leasehold.semaphore=m}"
			wait       = "leasehold.semaphore.wait.duration{leasehold.semaphore=m}"
		)
		check := func(step string, want map[string]metrictest.Point) {
			t.Helper()
			got := metrictest.Collect(t, reader)
			for series, w := range want {
				if got[series] != w {
					t.Errorf("%s: %s = %+v, want %+v; all: %v", step, series, got[series], w, got)
				}
			}
		}
		ctx := t.Context()
		p1, err := sem.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := sem.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sem.TryAcquire(ctx, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("third permit of two: %v", err)
		}
		check("full", map[string]metrictest.Point{held: {Value: 2}, rejections: {Value: 1}})
		go func() {
			time.Sleep(3 * time.Second)
			_ = p1.Release(ctx)
		}()
		p3, err := sem.Acquire(ctx, time.Minute) // waits 3 s for p1
		if err != nil {
			t.Fatal(err)
		}
		check("after a wait", map[string]metrictest.Point{held: {Value: 2}, rejections: {Value: 1}, wait: {Count: 1, Sum: 3}})
		_ = p2.Release(ctx)
		_ = p3.Release(ctx)
		_ = p3.Release(ctx)
		check("all released", map[string]metrictest.Point{held: {Value: 0}, rejections: {Value: 1}, wait: {Count: 1, Sum: 3}})
	})
}
