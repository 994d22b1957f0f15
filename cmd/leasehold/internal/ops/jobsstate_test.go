package ops_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
)

// countingRegistry records the limits of the listing calls.
type countingRegistry struct {
	jobs.Registry
	mu     sync.Mutex
	limits map[string][]int
}

func (c *countingRegistry) note(call string, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limits[call] = append(c.limits[call], limit)
}

func (c *countingRegistry) InFlight(ctx context.Context, limit int) ([]jobs.Job, error) {
	c.note("InFlight", limit)
	return c.Registry.InFlight(ctx, limit)
}

func (c *countingRegistry) Expired(ctx context.Context, limit int) ([]jobs.Job, error) {
	c.note("Expired", limit)
	return c.Registry.Expired(ctx, limit)
}

func (c *countingRegistry) Dead(ctx context.Context, limit int) ([]jobs.DeadJob, error) {
	c.note("Dead", limit)
	return c.Registry.Dead(ctx, limit)
}

// TestJobsStateBounded: with 300 expired jobs, a view of 10 asks the
// registry for at most 2×10 jobs per call (it asked InFlight for
// limit+expired: every expired job, payloads included, at every refresh),
// lists 10 expired and counts the rest; with few expired, the unexpired
// ones are listed.
func TestJobsStateBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := memjobs.New()
		reg := &countingRegistry{Registry: mem, limits: map[string][]int{}}
		src, err := ops.Open(ctx, ops.Config{Backend: "mem://"})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		src.Jobs = reg
		payload := make([]byte, 10<<10)
		for i := range 300 {
			if _, err := mem.Track(ctx, jobs.Job{ID: fmt.Sprintf("old-%03d", i), Payload: payload}, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Second)
		for i := range 5 {
			if _, err := mem.Track(ctx, jobs.Job{ID: fmt.Sprintf("new-%d", i)}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		v, err := src.JobsState(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for call, ls := range reg.limits {
			for _, l := range ls {
				if l > 20 {
					t.Errorf("%s(%d): more than 2×limit", call, l)
				}
			}
		}
		if len(v.Expired) != 10 || v.ExpiredMore != 290 || len(v.InFlight)+int(v.InFlightMore) != 5 {
			t.Fatalf("view: %d expired (+%d), %d in flight (+%d)", len(v.Expired), v.ExpiredMore, len(v.InFlight), v.InFlightMore)
		}
		// Few expired: the unexpired jobs are listed.
		for i := range 300 {
			in, _ := mem.Expired(ctx, 1)
			if len(in) == 0 {
				break
			}
			if err := mem.Remove(ctx, in[0].Ref()); err != nil {
				t.Fatal(err, i)
			}
		}
		if v, err = src.JobsState(ctx, 10); err != nil || len(v.InFlight) != 5 || len(v.Expired) != 0 {
			t.Fatalf("view %+v %v", v, err)
		}
		if _, err := src.JobsState(ctx, ops.MaxLimit+1); err == nil {
			t.Fatal("a limit above MaxLimit was accepted")
		}
	})
}
