package memjobs

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

// A retry record (Remove) is taken over by a Track within
// jobs.RetryWindow; after it, the record is gone and the job starts again
// from Attempt 0.
func TestRetryRecordsExpireAfterTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		ctx := t.Context()
		registrytest.Requeued(t, r, "late", 4)
		registrytest.Requeued(t, r, "in-time", 4)
		time.Sleep(jobs.RetryWindow)
		if j, err := r.Track(ctx, jobs.Job{ID: "in-time", Owner: "w"}, time.Minute); err != nil || j.Attempt != 1 || j.MaxRetries != 4 {
			t.Fatalf("Track at the end of the window: %+v, %v; want Attempt 1, MaxRetries 4", j, err)
		}
		time.Sleep(time.Second)
		if j, err := r.Track(ctx, jobs.Job{ID: "late", Owner: "w"}, time.Minute); err != nil || j.Attempt != 0 || j.MaxRetries != 0 || len(j.History) != 0 {
			t.Fatalf("Track after the window: %+v, %v; want a new job", j, err)
		}
	})
}

// Retry records that no Track takes over are dropped after
// jobs.RetryWindow by the next Remove or Track: the records grow with the
// jobs requeued in the window, never with the history.
func TestUntakenRetryRecordsAreDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		for i := range 1000 {
			registrytest.Requeued(t, r, strconv.Itoa(i), 0)
		}
		if n := len(r.retry.m); n != 1000 {
			t.Fatalf("%d retry records, want 1000", n)
		}
		time.Sleep(jobs.RetryWindow + time.Second)
		registrytest.Requeued(t, r, "last", 0)
		if n, q := len(r.retry.m), len(r.retry.q)-r.retry.head; n != 1 || q != 1 {
			t.Fatalf("%d retry records (%d queued) after the window, want only the last one", n, q)
		}
	})
}

// Done and Bury drop a retry record of their job's ID.
func TestDoneAndBuryDropRetryRecords(t *testing.T) {
	r := New()
	registrytest.DoneAndBuryDropRetryRecords(t, r, func(id string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.retry.put(id, retryRecord{attempt: 3, maxRetries: 2}, time.Now())
	})
}
