package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The scale benchmarks (issue 20) take long (minutes each: 100,000 leases
// held 5 minutes, 10,000,000 jobs loaded) and run apart from the rest:
//
//	go -C bench run ./cmd/report -scale    # about 40 minutes
//	go -C bench run ./cmd/report -scale -scale-runs BenchmarkTimersAtScale   # one of them
//
// writes the "Scale" section of docs/benchmarks.md (between scaleBegin and
// scaleEnd; the rest of the document stays as it is) and
// docs/benchmarks-scale-raw.txt. The full report keeps the section the
// document has.
const (
	scaleBegin = "<!-- scale: written by go -C bench run ./cmd/report -scale -->"
	scaleEnd   = "<!-- /scale -->"
)

// scaleRun is one scale benchmark and what the document says of it.
type scaleRun struct {
	bin, dir, pkg, top, pattern, benchtime string
	title, about                           string
	timed                                  bool // its time per op is a result (ms/op)
}

// scaleRuns are the scale benchmarks, in the document's order.
var scaleRuns = []scaleRun{
	{bin: "bench", dir: benchDir, pkg: ".", top: "BenchmarkScaleLeases", pattern: "^BenchmarkScaleLeases$/(redis|etcd|postgres)$", benchtime: "1x",
		title: "Leases held by one process through a lock.Keeper",
		about: "N leases (100,000; on PostgreSQL as many as the server's lock table takes) with ttl 30 s, held for 5 minutes by one `lock.Keeper`. " +
			"`rt/period` counts the client's round trips per renewal period (ttl/3; a pipeline, a pgx batch, an RPC or a stream message is one), " +
			"`calls/period` the server calls in them (scripts, statements, RPC messages); `goroutines` is what the leases added; `heap-B/lease` the live heap per lease; " +
			"`lost` the leases lost while held; `probe-p99-ms` another client's PING, `SELECT 1` or etcd Get meanwhile; `sessions` the PostgreSQL sessions holding the locks."},
	{bin: "bench", dir: benchDir, pkg: ".", top: "BenchmarkJobsScale", pattern: "^BenchmarkJobsScale$", benchtime: "5x", timed: true,
		title: "10,000,000 tracked jobs",
		about: "A registry of 10,000,000 jobs, 100 of them expired, on a server of its own. `scan` is the recovery scan (Registry.Expired, which finds the 100), " +
			"`heartbeat` one Registry.Heartbeat of 100,000 in-flight jobs (on PostgreSQL the steady one; `heartbeat-solo` the first of jobs in no lease (tables of earlier versions), which moves every job into a lease row; `heartbeat-adopt` the first by a registry that did not track the jobs, which adopts the other registry's leases whole; `heartbeat-adopted` that registry's steady heartbeat; `heartbeat-after-track` the first heartbeat of 100,000 jobs a registry has just tracked, which Track put into lease rows; `scan-leased` the scan once they are in leases); `ms/op` is the time of one. `max-call-µs` is the longest single server call meanwhile " +
			"(SLOWLOG on Redis, pg_stat_statements' max_exec_time on PostgreSQL), `typical-call-µs` a typical one, `probe-p99-µs` a PING or SELECT 1 from another client, `B/job` Redis memory per tracked job."},
}

// runHeader starts each run's output in docs/benchmarks-scale-raw.txt:
// "scale-run: <top> <date>".
const runHeader = "scale-run: "

// runScale runs the scale benchmarks named in only (their top names; all
// when only is empty) and writes their section; the others keep the
// results they have in docs/benchmarks-scale-raw.txt.
func runScale(ctx context.Context, only []string) error {
	started := time.Now()
	load := loadavg()
	tmp, err := os.MkdirTemp("", "leasehold-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	rawPath := filepath.Join(docsDir, "benchmarks-scale-raw.txt")
	kept := map[string]string{}
	if b, err := os.ReadFile(rawPath); err == nil {
		kept = splitRuns(string(b))
	}
	built := map[string]bool{}
	for _, r := range scaleRuns {
		if len(only) > 0 && !slices.Contains(only, r.top) {
			continue
		}
		bin := filepath.Join(tmp, r.bin+".test")
		if !built[r.bin] {
			progress("building %s benchmarks", r.bin)
			if err := command(ctx, r.dir, nil, "go", "test", "-c", "-o", bin, r.pkg); err != nil {
				return err
			}
			built[r.bin] = true
		}
		progress("%s -bench %s -benchtime %s", r.bin, r.pattern, r.benchtime)
		var out bytes.Buffer
		fmt.Fprintf(&out, "%s%s %s\nload: %s\n", runHeader, r.top, time.Now().UTC().Format("2006-01-02T15:04Z"), loadavg())
		args := []string{"-test.run=^$", "-test.bench=" + r.pattern, "-test.benchtime=" + r.benchtime, "-test.benchmem", "-test.timeout=90m"}
		err := command(ctx, r.dir, io.MultiWriter(&out, benchOnly{os.Stderr, new(strings.Builder)}), bin, args...)
		if err != nil {
			return err
		}
		kept[r.top] = out.String()
	}
	var raw strings.Builder
	rs := results{}
	for _, r := range scaleRuns {
		raw.WriteString(kept[r.top])
		rs.parse(strings.NewReader(kept[r.top]))
	}
	m := machine(started, load, "go -C bench run ./cmd/report -scale")
	section := scaleSection(rs, m, kept)
	path := filepath.Join(docsDir, "benchmarks.md")
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(withScale(string(old), section)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(rawPath, []byte(raw.String()), 0o644); err != nil {
		return err
	}
	progress("wrote the Scale section of docs/benchmarks.md in %v", time.Since(started).Round(time.Second))
	return nil
}

// splitRuns splits docs/benchmarks-scale-raw.txt into each run's output,
// by top name.
func splitRuns(raw string) map[string]string {
	runs := map[string]string{}
	var top string
	var cur strings.Builder
	flush := func() {
		if top != "" {
			runs[top] = cur.String()
		}
		cur.Reset()
	}
	for line := range strings.SplitAfterSeq(raw, "\n") {
		if rest, ok := strings.CutPrefix(line, runHeader); ok {
			flush()
			top, _, _ = strings.Cut(strings.TrimSpace(rest), " ")
		}
		cur.WriteString(line)
	}
	flush()
	return runs
}

// runDate is the date in a run's header, or "".
func runDate(out string) string {
	line, _, _ := strings.Cut(out, "\n")
	rest, ok := strings.CutPrefix(line, runHeader)
	if !ok {
		return ""
	}
	_, date, _ := strings.Cut(rest, " ")
	return date
}

// scaleSection renders the scale results: per benchmark, a table of its
// sub-benchmarks and every metric they reported.
func scaleSection(rs results, m machineInfo, runs map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n## Scale\n\n", scaleBegin)
	fmt.Fprintf(&b, "Run on %s (%d cores, %s, %s), %s, in %v, with `%s`; load %s.\n\n", m.cpu, m.cores, m.kernel, m.goVersion, m.date, m.took, m.command, m.load)
	for _, r := range scaleRuns {
		top := r.top
		var names, units []string
		for name, byUnit := range rs {
			if name != top && !strings.HasPrefix(name, top+"/") {
				continue
			}
			names = append(names, name)
			for u := range byUnit {
				if !slices.Contains(units, u) && u != "ns/op" && u != "B/op" && u != "allocs/op" {
					units = append(units, u)
				}
			}
		}
		slices.Sort(names)
		slices.Sort(units)
		if r.timed {
			units = append([]string{"ms/op"}, units...)
		}
		fmt.Fprintf(&b, "### %s\n\n%s", r.title, r.about)
		if d := runDate(runs[r.top]); d != "" {
			fmt.Fprintf(&b, " Run %s.", d)
		}
		b.WriteString("\n\n")
		fmt.Fprintf(&b, "Command: `go -C bench test -run '^$' -bench '%s' -benchtime %s -timeout 90m` (in %s).\n\n", r.pattern, r.benchtime, r.pkg)
		if len(names) == 0 {
			b.WriteString("(no result)\n\n")
			continue
		}
		fmt.Fprintf(&b, "| run | %s |\n|---|%s\n", strings.Join(units, " | "), strings.Repeat("---|", len(units)))
		for _, name := range names {
			row := []string{strings.TrimPrefix(strings.TrimPrefix(name, top), "/")}
			for _, u := range units {
				if u == "ms/op" {
					v, ok := rs.median(name, "ns/op")
					row = append(row, map[bool]string{true: scaleNum(v / 1e6), false: ""}[ok])
					continue
				}
				if v, ok := rs.median(name, u); ok {
					row = append(row, scaleNum(v))
				} else {
					row = append(row, "")
				}
			}
			fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
		}
		b.WriteString("\n")
	}
	b.WriteString(scaleEnd + "\n")
	return b.String()
}

// withScale puts section in doc in place of its scale section, or at its
// end when it has none.
func withScale(doc, section string) string {
	i, j := strings.Index(doc, scaleBegin), strings.Index(doc, scaleEnd)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	return doc[:i] + section + strings.TrimLeft(doc[j+len(scaleEnd):], "\n")
}

// keptScale is the scale section of the document at path, or "".
func keptScale(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	doc := string(b)
	i, j := strings.Index(doc, scaleBegin), strings.Index(doc, scaleEnd)
	if i < 0 || j < i {
		return ""
	}
	return doc[i:j+len(scaleEnd)] + "\n"
}

// scaleNum writes a large value with thousands separators and a small one
// with three significant digits.
func scaleNum(v float64) string {
	if math.Abs(v) >= 100 {
		return grouped(v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
