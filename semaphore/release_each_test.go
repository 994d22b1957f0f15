package semaphore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// eachCounted counts the handles its backend's ReleaseEach was given.
type eachCounted struct {
	*memlock.Lock
	handles atomic.Int32
}

func (e *eachCounted) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	e.handles.Add(int32(len(hs)))
	return e.Lock.ReleaseEach(ctx, hs)
}

// Permits released together by lock.ReleaseEach go to the backend's
// ReleaseEach (through the grant each wraps) and still stop counting as
// held (Permit.AfterRelease), as Permit.Release would.
func TestPermitsReleasedTogether(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	l := &eachCounted{Lock: testkit.Must(memlock.New())}
	sem := testkit.Must(semaphore.New(l, "together", 3, semaphore.WithCommon(lock.Common{MeterProvider: mp})))
	ctx := t.Context()
	var hs []lock.Handle
	for range 3 {
		hs = append(hs, testkit.Must(sem.TryAcquire(ctx, time.Minute)))
	}
	held := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "leasehold.semaphore.permits.held" {
					var n int64
					for _, p := range s.DataPoints {
						n += p.Value
					}
					return n
				}
			}
		}
		return -1
	}
	if n := held(); n != 3 {
		t.Fatalf("%d permits held, want 3", n)
	}
	for i, err := range lock.ReleaseEach(ctx, l, hs) {
		if err != nil {
			t.Fatalf("permit %d: %v", i, err)
		}
	}
	if n := held(); n != 0 || l.handles.Load() != 3 {
		t.Fatalf("after ReleaseEach: %d held, %d handles given to the backend's ReleaseEach; want 0 and 3", n, l.handles.Load())
	}
	for range 3 {
		if _, err := sem.TryAcquire(ctx, time.Minute); err != nil {
			t.Fatalf("a slot not free after ReleaseEach: %v", err)
		}
	}
}
