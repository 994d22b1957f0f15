package memjobs

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
)

// requeued tracks id, lets it expire, reclaims it and removes it (the
// recoverer after a requeue), leaving its retry record.
func requeued(t *testing.T, r *Registry, id string, maxRetries int) {
	t.Helper()
	ctx := context.Background()
	j, err := r.Track(ctx, jobs.Job{ID: id, Owner: "w", MaxRetries: maxRetries}, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	c, err := r.Reclaim(ctx, j.Ref(), "recoverer", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, c.Ref()); err != nil {
		t.Fatal(err)
	}
}

// A retry record (Remove) is taken over by a Track within
// jobs.RetryWindow; after it, the record is gone and the job starts again
// from Attempt 0.
func TestRetryRecordsExpireAfterTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		ctx := t.Context()
		requeued(t, r, "late", 4)
		requeued(t, r, "in-time", 4)
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
			requeued(t, r, strconv.Itoa(i), 0)
		}
		if n := len(r.retry.m); n != 1000 {
			t.Fatalf("%d retry records, want 1000", n)
		}
		time.Sleep(jobs.RetryWindow + time.Second)
		requeued(t, r, "last", 0)
		if n, q := len(r.retry.m), len(r.retry.q)-r.retry.head; n != 1 || q != 1 {
			t.Fatalf("%d retry records (%d queued) after the window, want only the last one", n, q)
		}
	})
}
