package memjobs_test

import (
	"errors"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

func TestConformance(t *testing.T) {
	registrytest.Run(t, func(testing.TB) jobs.Registry { return memjobs.New() })
}

// protocolOnly hides a registry's operator view: a registry that is only a
// jobs.Registry, as a third party may write.
type protocolOnly struct{ jobs.Registry }

// TestConformanceWithoutTheView: the suite runs on a registry that is no
// jobs.Inspector, checking the recovery protocol alone (the view's own
// cases skip).
func TestConformanceWithoutTheView(t *testing.T) {
	if _, ok := jobs.Registry(protocolOnly{}).(jobs.Inspector); ok {
		t.Fatal("protocolOnly is a jobs.Inspector")
	}
	registrytest.Run(t, func(testing.TB) jobs.Registry { return protocolOnly{memjobs.New()} })
}

// A completed epoch is remembered for jobs.DoneWindow: a Done retried
// within it returns nil, one retried after it ErrStale (the marker is
// dropped: the registry does not grow with its history).
func TestCompletionsAreForgottenAfterTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := memjobs.New()
		ctx := t.Context()
		j, err := r.Track(ctx, jobs.Job{ID: "j", Owner: "w"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Done(ctx, j.Ref()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(jobs.DoneWindow)
		if err := r.Done(ctx, j.Ref()); err != nil {
			t.Fatalf("Done retried at the end of the window: %v, want nil", err)
		}
		time.Sleep(time.Second)
		if err := r.Done(ctx, j.Ref()); !errors.Is(err, jobs.ErrStale) {
			t.Fatalf("Done retried after the window: %v, want ErrStale", err)
		}
	})
}

// Expired(limit) reads no more of the due heap than limit entries: with
// 20,000 jobs expired, Expired(10) allocates for ten, not for 20,000 (it
// collected and sorted every expired job before trimming).
func TestExpiredIsBoundedByItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := memjobs.New()
		ctx := t.Context()
		for i := range 20000 {
			if _, err := r.Track(ctx, jobs.Job{ID: strconv.Itoa(i), Owner: "w"}, time.Duration(1+i%997)*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := r.Expired(ctx, 10)
		runtime.ReadMemStats(&after)
		if err != nil || len(got) != 10 {
			t.Fatalf("Expired(10): %d jobs, %v", len(got), err)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Deadline.Before(got[i-1].Deadline) {
				t.Fatalf("Expired(10) not in deadline order: %v after %v", got[i].Deadline, got[i-1].Deadline)
			}
		}
		if !got[9].Deadline.Equal(got[0].Deadline) { // 21 jobs have the 1 ms lease
			t.Fatalf("Expired(10) did not return the earliest deadlines: %v … %v", got[0].Deadline, got[9].Deadline)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Fatalf("Expired(10) of 20,000 expired jobs allocated %d bytes", n)
		}
		if all, err := r.Expired(ctx, 0); err != nil || len(all) != 20000 {
			t.Fatalf("Expired(0): %d jobs, %v", len(all), err)
		}
	})
}
