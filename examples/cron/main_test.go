package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestCronExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3500*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, "mem://cron-example-test", 3); err != nil {
		t.Fatal(err)
	}
	// Each heartbeat tick is reported once, whichever host ran it.
	seen := map[string]int{}
	for _, line := range strings.Split(out.String(), "\n") {
		if i := strings.Index(line, "heartbeat report for tick "); i >= 0 {
			seen[line[i:]]++
		}
	}
	if len(seen) < 2 {
		t.Fatalf("too few heartbeat ticks:\n%s", out.String())
	}
	for tick, n := range seen {
		if n != 1 {
			t.Fatalf("%q ran %d times:\n%s", tick, n, out.String())
		}
	}
}
