package memjobs_test

import (
	"errors"
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
