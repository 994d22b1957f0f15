package ops_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock"
)

// listed is a registry with its operator view (jobs.Inspector).
type listed interface {
	jobs.Registry
	jobs.Inspector
}

// recordingRegistry records what a view asks of the registry: the limit of
// each listing call, and the payload bytes the calls return.
type recordingRegistry struct {
	listed
	mu       sync.Mutex
	limits   map[string][]int
	payloads int // bytes of payload returned, by every call
}

func record(reg listed) *recordingRegistry {
	return &recordingRegistry{listed: reg, limits: map[string][]int{}}
}

func (c *recordingRegistry) note(call string, limit int, js []jobs.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limits[call] = append(c.limits[call], limit)
	for _, j := range js {
		c.payloads += len(j.Payload)
	}
}

// reset forgets the calls recorded so far.
func (c *recordingRegistry) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limits, c.payloads = map[string][]int{}, 0
}

func (c *recordingRegistry) InFlight(ctx context.Context, limit int) ([]jobs.Job, error) {
	js, err := c.listed.InFlight(ctx, limit)
	c.note("InFlight", limit, js)
	return js, err
}

func (c *recordingRegistry) Expired(ctx context.Context, limit int) ([]jobs.Job, error) {
	js, err := c.listed.Expired(ctx, limit)
	c.note("Expired", limit, js)
	return js, err
}

func (c *recordingRegistry) Dead(ctx context.Context, limit int) ([]jobs.DeadJob, error) {
	ds, err := c.listed.Dead(ctx, limit)
	js := make([]jobs.Job, len(ds))
	for i, d := range ds {
		js[i] = d.Job
	}
	c.note("Dead", limit, js)
	return ds, err
}

func (c *recordingRegistry) DeadJob(ctx context.Context, id string) (jobs.DeadJob, error) {
	d, err := c.listed.DeadJob(ctx, id)
	c.note("DeadJob", 1, []jobs.Job{d.Job})
	return d, err
}

// checkBounded fails unless the calls recorded since the last reset are
// those of a view of limit: bounded listings (at most 2×limit jobs each,
// never "all"), no Expired nor DeadJob (they return payloads), and not
// one byte of payload returned.
func (c *recordingRegistry) checkBounded(t testing.TB, limit int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for call, ls := range c.limits {
		if call == "Expired" || call == "DeadJob" {
			t.Errorf("the view called %s %d times: it returns payloads", call, len(ls))
		}
		for _, l := range ls {
			if l < 1 || l > 2*limit {
				t.Errorf("%s(%d): not within 1…2×%d", call, l, limit)
			}
		}
	}
	if c.payloads != 0 {
		t.Errorf("the view's registry calls returned %d bytes of payload, want none", c.payloads)
	}
}

// TestJobsStateBounded: with 300 expired jobs of 10 KB, a view of 10 asks
// the registry for at most 2×10 jobs per call (it asked InFlight for
// limit+expired: every expired job, payloads included, at every refresh),
// never calls Expired, receives no payload, lists 10 expired and counts
// the rest; with few expired, up to 10 unexpired ones are listed too.
func TestJobsStateBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		mem := memjobs.New()
		reg := record(mem)
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
			if _, err := mem.Track(ctx, jobs.Job{ID: fmt.Sprintf("new-%d", i), Payload: payload}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			j, err := mem.Track(ctx, jobs.Job{ID: fmt.Sprintf("dead-%d", i), Payload: payload}, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := mem.Bury(ctx, j.Ref(), "test"); err != nil {
				t.Fatal(err)
			}
		}
		v, err := src.JobsState(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		reg.checkBounded(t, 10)
		if len(v.Expired) != 10 || v.ExpiredMore != 290 || len(v.InFlight)+int(v.InFlightMore) != 5 || len(v.Dead) != 3 || v.DeadMore != 0 {
			t.Fatalf("view: %d expired (+%d), %d in flight (+%d), %d dead (+%d)", len(v.Expired), v.ExpiredMore, len(v.InFlight), v.InFlightMore, len(v.Dead), v.DeadMore)
		}
		for i, j := range v.Expired {
			if j.ID[:4] != "old-" || j.ExpiresInMS >= 0 {
				t.Fatalf("expired row %d: %s expiring in %d ms, want an old-* (expired)", i, j.ID, j.ExpiresInMS)
			}
		}
		// Few expired: all of them are listed, and up to 10 unexpired.
		for i := range 297 {
			in, _ := mem.Expired(ctx, 1)
			if err := mem.Remove(ctx, in[0].Ref()); err != nil {
				t.Fatal(err, i)
			}
		}
		for i := range 30 {
			if _, err := mem.Track(ctx, jobs.Job{ID: fmt.Sprintf("more-%02d", i), Payload: payload}, 2*time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		reg.reset()
		if v, err = src.JobsState(ctx, 10); err != nil {
			t.Fatal(err)
		}
		reg.checkBounded(t, 10)
		if len(v.Expired) != 3 || v.ExpiredMore != 0 || len(v.InFlight) != 10 || v.InFlightMore != 25 {
			t.Fatalf("view: %d expired (+%d), %d in flight (+%d); want 3 (+0), 10 (+25)", len(v.Expired), v.ExpiredMore, len(v.InFlight), v.InFlightMore)
		}
		for i, j := range v.InFlight {
			if (i < 5) != (j.ID[:4] == "new-") || j.ExpiresInMS <= 0 {
				t.Fatalf("in-flight row %d: %s expiring in %d ms; want the 5 new-* first, by deadline", i, j.ID, j.ExpiresInMS)
			}
		}
		// None expired: the unexpired ones only.
		for i := range 3 {
			in, _ := mem.Expired(ctx, 1)
			if err := mem.Remove(ctx, in[0].Ref()); err != nil {
				t.Fatal(err, i)
			}
		}
		reg.reset()
		if v, err = src.JobsState(ctx, 10); err != nil || len(v.InFlight) != 10 || len(v.Expired) != 0 || v.InFlightMore != 25 {
			t.Fatalf("view %+v %v", v, err)
		}
		reg.checkBounded(t, 10)
		if _, err := src.JobsState(ctx, ops.MaxLimit+1); err == nil {
			t.Fatal("a limit above MaxLimit was accepted")
		}
	})
}

// protocolOnly is a registry without the operator's view: only a
// jobs.Registry, as a third party may write.
type protocolOnly struct{ jobs.Registry }

// TestJobsStateWithoutTheView: a registry that is no jobs.Inspector
// cannot be listed, and JobsState says so with an error matching
// lock.ErrInvalidArgument (as Locks does for a backend that is no
// lock.Inspector); Retry and Purge, which use the recovery protocol only,
// still work on it.
func TestJobsStateWithoutTheView(t *testing.T) {
	ctx := t.Context()
	src, err := ops.Open(ctx, ops.Config{Backend: "mem://"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	mem := memjobs.New()
	src.Jobs = protocolOnly{mem}
	_, err = src.JobsState(ctx, 10)
	if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "cannot list its jobs") {
		t.Fatalf("JobsState of a registry without the view: %v, want ErrInvalidArgument saying it cannot list its jobs", err)
	}
	for _, id := range []string{"a", "b"} {
		j, err := mem.Track(ctx, jobs.Job{ID: id, Payload: []byte("p")}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Bury(ctx, j.Ref(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	if j, err := src.Retry(ctx, "a"); err != nil || j.ID != "a" {
		t.Fatalf("Retry: %+v, %v", j, err)
	}
	if err := src.Purge(ctx, "b"); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if err := src.Purge(ctx, "b"); !errors.Is(err, ops.ErrNotFound) {
		t.Fatalf("second Purge: %v, want ErrNotFound", err)
	}
	if c, err := mem.Counts(ctx); err != nil || c != (jobs.Counts{Tracked: 1, Expired: c.Expired}) {
		t.Fatalf("counts after Retry and Purge: %+v, %v; want the retried job in flight, nothing dead", c, err)
	}
}
