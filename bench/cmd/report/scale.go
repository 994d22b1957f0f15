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
	bin, dir, pkg, pattern, benchtime string
	title, about                      string
}

// scaleRuns are the scale benchmarks, in the document's order.
var scaleRuns = []scaleRun{
	{bin: "bench", dir: benchDir, pkg: ".", pattern: "^BenchmarkScaleLeases$", benchtime: "1x",
		title: "Leases held by one process through a lock.Keeper",
		about: "N leases (100,000; on PostgreSQL as many as the server's lock table takes) with ttl 30 s, held for 5 minutes by one `lock.Keeper`. " +
			"`rt/period` counts the client's round trips per renewal period (ttl/3; a pipeline, a pgx batch, an RPC or a stream message is one), " +
			"`calls/period` the server calls in them (scripts, statements, RPC messages); `goroutines` is what the leases added; `heap-B/lease` the live heap per lease; " +
			"`lost` the leases lost while held; `probe-p99-ms` another client's PING, `SELECT 1` or etcd Get meanwhile; `sessions` the PostgreSQL sessions holding the locks."},
}

// runScale runs the scale benchmarks and writes their section.
func runScale(ctx context.Context) error {
	started := time.Now()
	load := loadavg()
	tmp, err := os.MkdirTemp("", "leasehold-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var raw bytes.Buffer
	rs := results{}
	built := map[string]bool{}
	for _, r := range scaleRuns {
		bin := filepath.Join(tmp, r.bin+".test")
		if !built[r.bin] {
			progress("building %s benchmarks", r.bin)
			if err := command(ctx, r.dir, nil, "go", "test", "-c", "-o", bin, r.pkg); err != nil {
				return err
			}
			built[r.bin] = true
		}
		progress("%s -bench %s -benchtime %s", r.bin, r.pattern, r.benchtime)
		fmt.Fprintf(&raw, "load: %s\n", loadavg())
		var out bytes.Buffer
		args := []string{"-test.run=^$", "-test.bench=" + r.pattern, "-test.benchtime=" + r.benchtime, "-test.benchmem", "-test.timeout=90m"}
		err := command(ctx, r.dir, io.MultiWriter(&out, benchOnly{os.Stderr, new(strings.Builder)}), bin, args...)
		raw.Write(out.Bytes())
		rs.parse(&out)
		if err != nil {
			return err
		}
	}
	m := machine(started, load, "go -C bench run ./cmd/report -scale")
	section := scaleSection(rs, m)
	path := filepath.Join(docsDir, "benchmarks.md")
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(withScale(string(old), section)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(docsDir, "benchmarks-scale-raw.txt"), raw.Bytes(), 0o644); err != nil {
		return err
	}
	progress("wrote the Scale section of docs/benchmarks.md in %v", time.Since(started).Round(time.Second))
	return nil
}

// scaleSection renders the scale results: per benchmark, a table of its
// sub-benchmarks and every metric they reported.
func scaleSection(rs results, m machineInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n## Scale\n\n", scaleBegin)
	fmt.Fprintf(&b, "Run on %s (%d cores, %s, %s), %s, in %v, with `%s`; load %s.\n\n", m.cpu, m.cores, m.kernel, m.goVersion, m.date, m.took, m.command, m.load)
	for _, r := range scaleRuns {
		top := strings.TrimSuffix(strings.TrimPrefix(r.pattern, "^"), "$")
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
		fmt.Fprintf(&b, "### %s\n\n%s\n\n", r.title, r.about)
		fmt.Fprintf(&b, "Command: `go -C bench test -run '^$' -bench '%s' -benchtime %s -timeout 90m` (in %s).\n\n", r.pattern, r.benchtime, r.pkg)
		if len(names) == 0 {
			b.WriteString("(no result)\n\n")
			continue
		}
		fmt.Fprintf(&b, "| run | %s |\n|---|%s\n", strings.Join(units, " | "), strings.Repeat("---|", len(units)))
		for _, name := range names {
			row := []string{strings.TrimPrefix(strings.TrimPrefix(name, top), "/")}
			for _, u := range units {
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
