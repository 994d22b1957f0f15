package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScaleSectionReplacedInPlace(t *testing.T) {
	rs := results{}
	rs.parse(strings.NewReader("BenchmarkScaleLeases/redis-2 \t 1 \t 300000000000 ns/op \t 100.0 rt/period \t 0.75 probe-p99-ms \t 100000 leases\n"))
	section := scaleSection(rs, machineInfo{cores: 2})
	for _, want := range []string{"| redis | 100,000 | 0.75 | 100 |", "## Scale", scaleBegin, scaleEnd} {
		if !strings.Contains(section, want) {
			t.Fatalf("section lacks %q:\n%s", want, section)
		}
	}
	doc := withScale("# Benchmarks\n\ntext\n", section)
	if !strings.HasPrefix(doc, "# Benchmarks\n\ntext\n\n"+scaleBegin) {
		t.Fatalf("section not appended:\n%s", doc)
	}
	again := withScale(doc+"after\n", strings.Replace(section, "100,000", "6,400", 1))
	if strings.Count(again, scaleBegin) != 1 || !strings.Contains(again, "6,400") || !strings.HasSuffix(again, "after\n") {
		t.Fatalf("section not replaced in place:\n%s", again)
	}
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte(again), 0o644); err != nil {
		t.Fatal(err)
	}
	if kept := keptScale(path); !strings.Contains(kept, "6,400") || strings.Contains(kept, "after") {
		t.Fatalf("keptScale: %q", kept)
	}
}
