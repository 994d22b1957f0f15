package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScaleSectionReplacedInPlace(t *testing.T) {
	rs := results{}
	out := runHeader + "BenchmarkScaleLeases 2026-11-25T01:00Z\nload: 1\nBenchmarkScaleLeases/redis-2 \t 1 \t 300000000000 ns/op \t 100.0 rt/period \t 0.75 probe-p99-ms \t 100000 leases\n"
	runs := splitRuns(out + runHeader + "BenchmarkJobsScale 2026-11-24T01:00Z\nBenchmarkJobsScale/redis/scan-2 \t 5 \t 850000 ns/op\n")
	if runs["BenchmarkScaleLeases"] != out || !strings.Contains(runs["BenchmarkJobsScale"], "850000") {
		t.Fatalf("splitRuns: %q", runs)
	}
	rs.parse(strings.NewReader(runs["BenchmarkScaleLeases"]))
	rs.parse(strings.NewReader(runs["BenchmarkJobsScale"]))
	section := scaleSection(rs, machineInfo{cores: 2}, runs)
	for _, want := range []string{"| redis | 100,000 | 0.75 | 100 |", "## Scale", scaleBegin, scaleEnd, "Run 2026-11-25T01:00Z.", "| redis/scan | 0.85 |"} {
		if !strings.Contains(section, want) {
			t.Fatalf("section lacks %q:\n%s", want, section)
		}
	}
	doc := withScale("# Benchmarks\n\ntext\n", section)
	if !strings.HasPrefix(doc, "# Benchmarks\n\ntext\n\n"+scaleBegin) {
		t.Fatalf("section not appended:\n%s", doc)
	}
	const after = "text after the section\n" // "after" alone is in the section (heartbeat-after-track)
	again := withScale(doc+after, strings.Replace(section, "100,000", "6,400", 1))
	if strings.Count(again, scaleBegin) != 1 || !strings.Contains(again, "6,400") || !strings.HasSuffix(again, after) {
		t.Fatalf("section not replaced in place:\n%s", again)
	}
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte(again), 0o644); err != nil {
		t.Fatal(err)
	}
	if kept := keptScale(path); !strings.Contains(kept, "6,400") || strings.Contains(kept, after) {
		t.Fatalf("keptScale: %q", kept)
	}
}
