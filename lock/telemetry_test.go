package lock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leasehold-go/leasehold/internal/metrictest"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func TestMetricsAndLogs(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	opts := []lock.Option{lock.WithMeterProvider(mp), lock.WithLogger(logger)}

	l := memlock.New(opts...)
	ctx := context.Background()
	h, err := lock.Acquire(ctx, l, "k", time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k", time.Second); err == nil {
		t.Fatal("second grant")
	}
	lease, _ := lock.Keep(ctx, h, time.Second, append(opts, lock.WithRenewInterval(time.Hour))...)
	<-lease.Context().Done() // lost at its deadline
	_ = lease.Release(ctx)

	got := metrictest.Points(t, reader)
	for _, want := range []string{
		"leasehold.lock.attempt.duration{leasehold.backend=memlock,leasehold.outcome=acquired}",
		"leasehold.lock.attempt.duration{leasehold.backend=memlock,leasehold.outcome=busy}",
		"leasehold.lock.wait.duration{leasehold.outcome=acquired}",
		"leasehold.lock.losses{leasehold.reason=deadline}",
		"leasehold.lock.releases{leasehold.backend=memlock,leasehold.outcome=lost}",
	} {
		if got[want] != 1 {
			t.Errorf("%s = %d, want 1; all: %v", want, got[want], got)
		}
	}
	if got["leasehold.lock.leases.active{}"] != 0 {
		t.Errorf("active leases %d after release", got["leasehold.lock.leases.active{}"])
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"leasehold: lease lost\" key=k") {
		t.Errorf("no lease-lost warning in the log:\n%s", logs.String())
	}
}
