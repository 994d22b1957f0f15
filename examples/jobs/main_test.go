package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// TestMain lets the test binary stand in for the program when the process
// demo starts it again as a worker.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-redis" {
		main()
		return
	}
	testenv.Main(m)
}

// checkSummary reads the program's last line: every job completed, and
// the runs beyond the first — at least the crashed worker's job, run again
// elsewhere — are no more than the recoveries (and jobs a worker put back)
// that caused them.
func checkSummary(t *testing.T, out string, total int) {
	t.Helper()
	var completed, of, twice int
	for line := range strings.Lines(out) {
		if strings.Contains(line, "jobs completed;") {
			if _, err := fmt.Sscanf(line, "%d of %d jobs completed; %d ran twice; none lost", &completed, &of, &twice); err != nil {
				t.Fatalf("summary %q: %v", line, err)
			}
		}
	}
	causes := strings.Count(out, "recovered job-") + strings.Count(out, "put it back")
	if completed != total || of != total || twice < 1 || twice > causes {
		t.Fatalf("%d of %d completed, %d ran twice, %d recoveries; want all %d completed and 1 to %d runs beyond the first:\n%s",
			completed, of, twice, causes, total, causes, out)
	}
	t.Logf("%d jobs completed, %d ran twice after %d recoveries", completed, twice, causes)
}

func TestJobsExampleProcesses(t *testing.T) {
	var out bytes.Buffer
	if err := runProcesses(t.Context(), &out, testenv.Redis(t).Addr(), 20); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "SIGKILLed in the middle of") {
		t.Fatalf("no worker was killed:\n%s", out.String())
	}
	checkSummary(t, out.String(), 20)
}

func TestJobsExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, 20); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "crashes in the middle of") {
		t.Fatalf("no worker crashed:\n%s", out.String())
	}
	checkSummary(t, out.String(), 20)
}
