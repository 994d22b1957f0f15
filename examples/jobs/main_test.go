package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestJobsExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, "", 20); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "recovered job-") || !strings.Contains(out.String(), "20 of 20 jobs completed") {
		t.Fatalf("output:\n%s", out.String())
	}
}
