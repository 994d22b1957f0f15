package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"REJECTED by the ledger", "stale writes rejected:           1", "max simultaneous valid holders:  1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
