package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/leasehold-go/leasehold/internal/testenv"
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

func TestJobsExampleProcesses(t *testing.T) {
	var out bytes.Buffer
	if err := runProcesses(t.Context(), &out, testenv.Redis(t).Addr(), 20); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"SIGKILLed in the middle of", "recovered job-", "20 of 20 jobs completed"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestJobsExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, 20); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "recovered job-") || !strings.Contains(out.String(), "20 of 20 jobs completed") {
		t.Fatalf("output:\n%s", out.String())
	}
}
