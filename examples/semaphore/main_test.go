package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Nine goroutines share three slots, each call twice as long as the ttl:
// never more than three at once, and no slot lost.
func TestSemaphoreExample(t *testing.T) {
	var out bytes.Buffer
	c := config{url: "mem://example-test", workers: 9, slots: 3, calls: 1, ttl: 200 * time.Millisecond, work: 400 * time.Millisecond}
	if err := run(t.Context(), &out, c); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "9 calls of 400ms by 9 goroutines through 3 slots with a 200ms ttl; at most 3 in flight") {
		t.Fatalf("output:\n%s", out.String())
	}
}
