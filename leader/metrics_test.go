package leader_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/metrictest"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Two terms, of 7 s and 3 s: two transitions each way, the tenure of each
// term, and leading back to 0 once Run returns.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := metrictest.New()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const (
			transitions = "leasehold.leader.transitions{leasehold.election=m,leasehold.transition="
			leading     = "leasehold.leader.leading{leasehold.election=m}"
			tenure      = "leasehold.leader.tenure{leasehold.election=m}"
		)
		terms := 0
		_ = leader.Run(ctx, testkit.Must(memlock.New()), "m", func(ctx context.Context) error {
			terms++
			got := metrictest.Collect(t, reader)
			if got[leading].Value != 1 || got[transitions+"elected}"].Value != int64(terms) {
				t.Errorf("in term %d: %v", terms, got)
			}
			if terms == 1 {
				time.Sleep(7 * time.Second)
				return errors.New("boom")
			}
			time.Sleep(3 * time.Second)
			cancel()
			return nil
		}, append(timing, leader.WithCommon(lock.Common{MeterProvider: mp}))...)
		got := metrictest.Collect(t, reader)
		for series, want := range map[string]metrictest.Point{
			transitions + "elected}": {Value: 2},
			transitions + "demoted}": {Value: 2},
			leading:                  {Value: 0},
			tenure:                   {Count: 2, Sum: 10},
		} {
			if got[series] != want {
				t.Errorf("%s = %+v, want %+v", series, got[series], want)
			}
		}
		if t.Failed() {
			t.Logf("all: %v", got)
		}
	})
}

// A term whose fn panics ends as any other before the panic leaves Run:
// OnDemoted is told ErrPanicked, and leading is back to 0. It was not:
// the gauge stayed at 1 and OnDemoted never ran, so a supervisor that
// recovers and runs again showed two leaders on one process.
func TestPanicEndsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp, reader := metrictest.New()
		var demoted []error
		var panicked any
		func() {
			defer func() { panicked = recover() }()
			_ = leader.Run(t.Context(), testkit.Must(memlock.New()), "m", func(ctx context.Context) error {
				panic("bug in the work")
			}, append(timing, leader.WithCommon(lock.Common{MeterProvider: mp}),
				leader.OnDemoted(func(_ leader.Term, cause error) { demoted = append(demoted, cause) }))...)
		}()
		if panicked != "bug in the work" {
			t.Errorf("Run's panic: %v, want fn's", panicked)
		}
		if len(demoted) != 1 || !errors.Is(demoted[0], leader.ErrPanicked) {
			t.Errorf("OnDemoted was told %v, want once leader.ErrPanicked", demoted)
		}
		got := metrictest.Collect(t, reader)
		for series, want := range map[string]metrictest.Point{
			"leasehold.leader.transitions{leasehold.election=m,leasehold.transition=demoted}": {Value: 1},
			"leasehold.leader.leading{leasehold.election=m}":                                  {Value: 0},
		} {
			if got[series] != want {
				t.Errorf("%s = %+v, want %+v", series, got[series], want)
			}
		}
	})
}

// A fn that calls runtime.Goexit (a test's t.FailNow) ends its term, but
// is no panic: OnDemoted is not told ErrPanicked, and nothing panics out
// of Run.
func TestGoexitEndsTheTermAsNoPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var demoted []error
		var recovered any
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { recovered = recover() }()
			_ = leader.Run(t.Context(), testkit.Must(memlock.New()), "g", func(ctx context.Context) error {
				runtime.Goexit()
				return nil
			}, append(timing, leader.OnDemoted(func(_ leader.Term, c error) { demoted = append(demoted, c) }))...)
		}()
		<-done
		if recovered != nil {
			t.Fatalf("a Goexit panicked out of Run: %v", recovered)
		}
		if len(demoted) != 1 || demoted[0] == nil || errors.Is(demoted[0], leader.ErrPanicked) {
			t.Errorf("fn called runtime.Goexit: OnDemoted was told %v; want once an error other than ErrPanicked", demoted)
		}
	})
}
