package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSemaphoreExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, "mem://example-test", 6, 3, 3); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "18 calls by 6 workers through 3 slots; at most 3 in flight") {
		t.Fatalf("output:\n%s", out.String())
	}
}
