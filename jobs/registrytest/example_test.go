package registrytest_test

import (
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

// Compile-only (no Output): Run takes the *testing.T of a test. In the
// _test.go file of a jobs.Registry implementation, the factory returns a
// registry over fresh, empty state for each subtest (its own namespace or
// table).
func ExampleRun() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		registrytest.Run(t, func(t testing.TB) jobs.Registry {
			return memjobs.New()
		})
	}
}

// Compile-only (no Output): Requeued takes the testing.TB of a test. A
// registry's own test of its retry records: one left by Requeued is taken
// over by the next Track of the ID.
func ExampleRequeued() {
	_ = func(t *testing.T) { // func TestRetryRecord(t *testing.T)
		r := memjobs.New()
		registrytest.Requeued(t, r, "j", 3)
		j, err := r.Track(t.Context(), jobs.Job{ID: "j", Owner: "worker-b"}, time.Minute)
		if err != nil || j.Attempt != 1 || j.MaxRetries != 3 {
			t.Fatalf("Track after a requeue: %+v, %v", j, err)
		}
	}
}

// Compile-only (no Output): put writes a retry record straight into the
// registry's store (a Redis hash, a row), as redisjobs' and pgjobs' tests
// do.
func ExampleDoneAndBuryDropRetryRecords() {
	_ = func(t *testing.T, r jobs.Registry, writeRecord func(id string, attempt, maxRetries int)) {
		registrytest.DoneAndBuryDropRetryRecords(t, r, func(id string) { writeRecord(id, 3, 2) })
	}
}

// Compile-only (no Output): a registry that sends a heartbeat in chunks
// (redisjobs: 100 jobs a script; pgjobs: 200 a statement) checks 3½ of
// them, with stale jobs on both sides of every boundary.
func ExampleChunkedHeartbeat() {
	_ = func(t *testing.T, r jobs.Registry, chunk int) {
		registrytest.ChunkedHeartbeat(t, r, chunk, 3)
	}
}

// Compile-only (no Output): poison makes the call of one chunk fail on the
// server (redisjobs' test turns a job's hash into a list; pgjobs' adds a
// trigger that raises) and returns what undoes it.
func ExampleFailedChunk() {
	_ = func(t *testing.T, r jobs.Registry, chunk int, poison func(id string) (restore func())) {
		registrytest.FailedChunk(t, r, chunk, 3, 1, poison) // the second of 3 chunks fails
	}
}

// Compile-only (no Output): listings in pages of 500 (redisjobs,
// pgjobs), checked over two pages and a bit.
func ExamplePages() {
	_ = func(t *testing.T, r jobs.Registry) {
		registrytest.Pages(t, r, 2*500+3)
	}
}
