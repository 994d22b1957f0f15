package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
)

// TestJobsWithoutTheView: `leasehold jobs` on a registry that is no
// jobs.Inspector (the operator's view is optional) fails with exit 2, the
// code of a backend without lock.Inspector under `leasehold locks`, and a
// message that says the registry cannot list its jobs; `jobs retry` and
// `jobs purge` use the recovery protocol only and still work.
func TestJobsWithoutTheView(t *testing.T) {
	ctx := t.Context()
	src, err := ops.Open(ctx, ops.Config{Backend: "mem://"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	mem := memjobs.New()
	src.Jobs = struct{ jobs.Registry }{mem} // the view hidden
	for _, id := range []string{"a", "b"} {
		j, err := mem.Track(ctx, jobs.Job{ID: id}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Bury(ctx, j.Ref(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	e := &env{stdout: &stdout, stderr: &stderr, c: common{limit: 10, timeout: time.Minute}, now: time.Now}
	if code := e.report(e.jobs(ctx, src, nil)); code != ExitUsage || !strings.Contains(stderr.String(), "cannot list its jobs") {
		t.Fatalf("jobs: exit %d, %q; want %d saying the registry cannot list its jobs", code, stderr.String(), ExitUsage)
	}
	e.c.json = true
	stdout.Reset()
	var je jsonError
	if code := e.report(e.jobs(ctx, src, nil)); code != ExitUsage {
		t.Fatalf("jobs --json: exit %d, want %d", code, ExitUsage)
	}
	if err := json.Unmarshal(stdout.Bytes(), &je); err != nil || je.Kind != kindUsage || je.Exit != ExitUsage || !strings.Contains(je.Error, "cannot list its jobs") {
		t.Fatalf("jobs --json: %s (%v)", stdout.String(), err)
	}
	e.c.json = false
	if code := e.report(e.jobs(ctx, src, []string{"retry", "a"})); code != ExitOK {
		t.Fatalf("jobs retry: exit %d, %s", code, stderr.String())
	}
	if code := e.report(e.jobs(ctx, src, []string{"purge", "b"})); code != ExitOK {
		t.Fatalf("jobs purge: exit %d, %s", code, stderr.String())
	}
	if code := e.report(e.jobs(ctx, src, []string{"purge", "b"})); code != ExitNotFound {
		t.Fatalf("jobs purge of a purged job: exit %d, want %d", code, ExitNotFound)
	}
}
