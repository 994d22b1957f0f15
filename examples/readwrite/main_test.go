package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Eight readers back to back and three writes: no torn read, every write
// done (the writer is not starved), and the transfers both ways finish.
func TestReadWriteExample(t *testing.T) {
	var out bytes.Buffer
	c := config{url: "mem://readwrite-test", readers: 8, writes: 3, ttl: time.Second, duration: 5 * time.Millisecond}
	if err := run(t.Context(), &out, c); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"writer: version 3", "torn reads: 0", "total 200"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
