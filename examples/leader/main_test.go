package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestLeaderExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), &out, "mem://example-test", 3, 2); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "leads (term"); n != 3 {
		t.Fatalf("%d terms, want 3:\n%s", n, out.String())
	}
	if strings.Contains(out.String(), "refused") {
		t.Fatalf("a write was refused:\n%s", out.String())
	}
}
