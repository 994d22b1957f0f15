package lock_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/leasehold-go/leasehold/internal/testkit"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold-go/leasehold/internal/testkit/metrictest"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func TestMetricsAndLogs(t *testing.T) {
	mp, reader := metrictest.New()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	common := lock.Common{MeterProvider: mp, Logger: logger}
	opts := []lock.Option{lock.WithCommon(common)}

	l := testkit.Must(memlock.New(memlock.WithCommon(common)))
	ctx := context.Background()
	h, err := lock.Acquire(ctx, l, "k", time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "k", time.Second); err == nil {
		t.Fatal("second grant")
	}
	lease, _ := lock.Keep(ctx, h, 2*time.Hour, append(opts, lock.WithRenewInterval(time.Hour))...)
	<-lease.Context().Done() // lost at its deadline
	_ = lease.Release(ctx)

	metrictest.Expect(t, metrictest.Points(t, reader), map[string]int64{
		"leasehold.lock.attempt.duration{leasehold.backend=memlock,leasehold.outcome=acquired}": 1,
		"leasehold.lock.attempt.duration{leasehold.backend=memlock,leasehold.outcome=busy}":     1,
		"leasehold.lock.wait.duration{leasehold.outcome=acquired}":                              1,
		"leasehold.lock.losses{leasehold.reason=deadline}":                                      1,
		"leasehold.lock.releases{leasehold.backend=memlock,leasehold.outcome=lost}":             1,
		"leasehold.lock.leases.active{}":                                                        0, // after Release
	})
	if !strings.Contains(logs.String(), "level=WARN msg=\"leasehold: lease lost\" key=k") {
		t.Errorf("no lease-lost warning in the log:\n%s", logs.String())
	}
}

// scriptedExtend answers Extend from a script: nil forwards to the real
// handle, any other error is returned as is; past the script, ErrLost.
type scriptedExtend struct {
	lock.Handle
	mu     sync.Mutex
	script []error
}

func (h *scriptedExtend) Extend(ctx context.Context, ttl time.Duration) error {
	h.mu.Lock()
	if len(h.script) == 0 {
		h.mu.Unlock()
		return backendkit.Lost("scripted")
	}
	err := h.script[0]
	h.script = h.script[1:]
	h.mu.Unlock()
	if err != nil {
		return err
	}
	return h.Handle.Extend(ctx, ttl)
}

// TestRenewalOutcomesAndAcquireSpan: Keep counts each renewal by outcome
// (unknown, renewed, lost: one of each here, in that order) and reports the
// loss; every blocking Acquire is one span, with the token when it succeeds
// and an error status when it ends without a grant.
func TestRenewalOutcomesAndAcquireSpan(t *testing.T) {
	mp, reader := metrictest.New()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	common := lock.Common{MeterProvider: mp, TracerProvider: tp}
	opts := []lock.Option{lock.WithCommon(common)}

	l := testkit.Must(memlock.New(memlock.WithCommon(common)))
	ctx := context.Background()
	h, err := lock.Acquire(ctx, l, "k", time.Minute, opts...)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := lock.Acquire(short, testkit.Must(l.Share()), "k", time.Minute, opts...); err == nil {
		t.Fatal("a second grant of a held key")
	}

	scripted := &scriptedExtend{Handle: h, script: []error{backendkit.Unavailable("extend", errors.New("connection reset")), nil}}
	lease, err := lock.Keep(ctx, scripted, time.Minute, append(opts, lock.WithRenewInterval(time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease was not lost after the scripted ErrLost")
	}
	if cause := context.Cause(lease.Context()); !errors.Is(cause, lock.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	_ = lease.Release(ctx)

	metrictest.Expect(t, metrictest.Points(t, reader), map[string]int64{
		"leasehold.lock.renewals{leasehold.outcome=unknown}":        1,
		"leasehold.lock.renewals{leasehold.outcome=renewed}":        1,
		"leasehold.lock.renewals{leasehold.outcome=lost}":           1,
		"leasehold.lock.losses{leasehold.reason=renewal}":           1,
		"leasehold.lock.wait.duration{leasehold.outcome=acquired}":  1,
		"leasehold.lock.wait.duration{leasehold.outcome=cancelled}": 1,
	})

	ended := spans.GetSpans()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want one per Acquire (2): %v", len(ended), ended)
	}
	for i, s := range ended {
		if s.Name != "leasehold.lock.Acquire" || s.InstrumentationScope.Name != backendkit.ScopeName {
			t.Errorf("span %d: %q in scope %q, want leasehold.lock.Acquire in %q", i, s.Name, s.InstrumentationScope.Name, backendkit.ScopeName)
		}
		attrs := attribute.NewSet(s.Attributes...)
		if keys, _ := attrs.Value("leasehold.keys"); len(keys.AsStringSlice()) != 1 || keys.AsStringSlice()[0] != "k" {
			t.Errorf("span %d: leasehold.keys = %v, want [k]", i, keys.AsStringSlice())
		}
		token, hasToken := attrs.Value("leasehold.token")
		switch i {
		case 0: // granted
			if !hasToken || uint64(token.AsInt64()) != h.Token() || s.Status.Code != codes.Unset {
				t.Errorf("granted Acquire's span: token %v (%v), status %v; want token %d, no error", token.AsInt64(), hasToken, s.Status, h.Token())
			}
		case 1: // cancelled while the key was held
			if hasToken || s.Status.Code != codes.Error || len(s.Events) == 0 {
				t.Errorf("cancelled Acquire's span: token %v, status %v, %d events; want no token, an error status and the error recorded", hasToken, s.Status, len(s.Events))
			}
		}
	}
}
