package semaphore_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric"

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

// A permit whose Release had an unknown outcome (the backend did not
// answer) counts as held until its grant's ValidUntil, when the grant has
// certainly ended, and no longer: here Do's release times out, nothing
// will ever release that grant again, and it lapses at its ttl. The
// metric used to go down only on a release that succeeded or found the
// grant lost: it stayed 1 for the life of the process. A Release retried
// with success before ValidUntil counts once, not again at ValidUntil.
func TestHeldMetricEndsAtTheValidUntilOfAnUnknownRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		mp, reader := metrictest.New()
		bare := &bareLock{Lock: testkit.Must(memlock.New())}
		sem, err := semaphore.New(bare, "unknown", 2,
			semaphore.WithTTL(ttl), semaphore.WithCommon(lock.Common{MeterProvider: mp}))
		if err != nil {
			t.Fatal(err)
		}
		const held = "leasehold.semaphore.permits.held{leasehold.semaphore=unknown}"
		check := func(step string, want int64) {
			t.Helper()
			if got := metrictest.Collect(t, reader)[held].Value; got != want {
				t.Errorf("%s: %s = %d, want %d", step, held, got, want)
			}
		}
		ctx := t.Context()
		bare.unknownReleases.Store(1)
		if err := sem.Do(ctx, func(context.Context) error { return nil }); !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("Do: %v, want the injected release failure", err)
		}
		check("Do's release unknown", 1) // the grant may be held until its ValidUntil
		time.Sleep(ttl - time.Second)
		check("before its ValidUntil", 1)
		time.Sleep(2 * time.Second)
		check("after its ValidUntil", 0)

		p, err := sem.TryAcquire(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		bare.unknownReleases.Store(1)
		if err := p.Release(ctx); !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("Release: %v, want the injected failure", err)
		}
		check("the first Release unknown", 1)
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release again: %v", err)
		}
		check("Release again", 0)
		time.Sleep(2 * ttl)
		check("past the ValidUntil of a Release retried", 0)
	})
}

// A Meter of a comparable type that holds a value that is not comparable
// (a struct whose interface field holds a map): New compared it with the
// last semaphore's Meter with ==, which panicked from the second
// semaphore made with it on. It now gets instruments of its own.
func TestNewWithAMeterOfAnUncomparableValue(t *testing.T) {
	mp, reader := metrictest.New()
	wrapped := &meterProvider{mp, map[string]string{}}
	var sems []*semaphore.Semaphore
	for _, name := range []string{"m1", "m2"} {
		sem, err := semaphore.New(testkit.Must(memlock.New()), name, 1, semaphore.WithCommon(lock.Common{MeterProvider: wrapped}))
		if err != nil {
			t.Fatal(err)
		}
		sems = append(sems, sem)
	}
	for _, sem := range sems {
		p, err := sem.TryAcquire(t.Context(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(t.Context())
	}
	got := metrictest.Collect(t, reader)
	for _, name := range []string{"m1", "m2"} {
		if series := "leasehold.semaphore.permits.held{leasehold.semaphore=" + name + "}"; got[series].Value != 1 {
			t.Errorf("%s = %+v, want 1", series, got[series])
		}
	}
}

// meterProvider's Meters are comparable wrappers of a Meter that is not.
type meterProvider struct {
	metric.MeterProvider
	tags map[string]string
}

func (p *meterProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return wrappedMeter{taggedMeter{p.MeterProvider.Meter(name, opts...), p.tags}}
}

type taggedMeter struct {
	metric.Meter
	tags map[string]string
}

type wrappedMeter struct{ metric.Meter }
