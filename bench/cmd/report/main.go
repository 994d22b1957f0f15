// Command report runs the comparison benchmarks of ../.. (the bench
// module) and the main module's semaphore, recovery-scan and heartbeat
// benchmarks, sequentially, then writes docs/benchmarks.md (tables of
// medians, the machine, the command), the charts docs/benchmarks-*.svg, and the raw
// go test output docs/benchmarks-raw.txt (benchstat reads it).
//
//	go -C bench run ./cmd/report              # about 12 minutes
//	go -C bench run ./cmd/report -rounds 1 -contended 1 -ticks-short   # a quick look
//
// Latency benchmarks run in rounds: each round runs every library once, so
// that a burst of load from elsewhere on the machine hits all of them
// rather than one; the tables give the median over rounds.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	rounds := flag.Int("rounds", 5, "rounds of the latency benchmarks (uncontended, handoff, semaphore)")
	contended := flag.Int("contended", 2, "rounds of the 16-worker contention run (10 s per library each)")
	short := flag.Bool("ticks-short", false, "shrink the long workloads as -short does (3 ticks, 1 s of contention, one kill)")
	scan := flag.Bool("scan", true, "run the main module's 1,000,000-job recovery scan benchmark (about a minute)")
	flag.Parse()
	if err := run(*rounds, *contended, *short, *scan); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// paths: this command runs from the bench module (go -C bench run).
const (
	benchDir = "."
	rootDir  = ".."
	docsDir  = "../docs"
)

func run(rounds, contended int, short, scan bool) error {
	started := time.Now()
	load := loadavg()
	tmp, err := os.MkdirTemp("", "leasehold-report-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bins := map[string][2]string{ // name: dir, package
		"bench":     {benchDir, "."},
		"semaphore": {rootDir, "./semaphore"},
		"jobs":      {rootDir, "./jobs"},
		"redislock": {rootDir, "./lock/redislock"},
		"backend":   {rootDir, "./backend"},
	}
	for name, dp := range bins {
		progress("building %s benchmarks", name)
		if err := command(dp[0], nil, "go", "test", "-c", "-o", filepath.Join(tmp, name+".test"), dp[1]); err != nil {
			return err
		}
	}
	var raw bytes.Buffer
	rs := results{}
	bench := func(bin, pattern, benchtime string, extra ...string) error {
		progress("%s -bench %s -benchtime %s %s", bin, pattern, benchtime, strings.Join(extra, " "))
		var out bytes.Buffer
		args := append([]string{"-test.run=^$", "-test.bench=" + pattern, "-test.benchtime=" + benchtime, "-test.benchmem", "-test.timeout=30m"}, extra...)
		if short {
			args = append(args, "-test.short")
		}
		dir := bins[bin][0]
		err := command(dir, io.MultiWriter(&out, benchOnly{os.Stderr, new(strings.Builder)}), filepath.Join(tmp, bin+".test"), args...)
		raw.Write(out.Bytes())
		rs.parse(&out)
		return err
	}
	for r := 1; r <= rounds; r++ {
		progress("latency round %d of %d", r, rounds)
		if err := bench("bench", "^BenchmarkUncontended$", "1s"); err != nil {
			return err
		}
		if err := bench("bench", "^BenchmarkHandoff$", "50x"); err != nil {
			return err
		}
		if err := bench("semaphore", "^BenchmarkSemaphore$/.*/held=15", "1s"); err != nil {
			return err
		}
		if err := bench("redislock", "^BenchmarkReplicaAcks$", "3000x"); err != nil {
			return err
		}
	}
	for r := 1; r <= contended; r++ {
		progress("contention round %d of %d", r, contended)
		if err := bench("bench", "^BenchmarkContended$", "1x"); err != nil {
			return err
		}
	}
	if err := bench("bench", "^BenchmarkOncePerTick$", "1x"); err != nil {
		return err
	}
	if err := bench("bench", "^BenchmarkRecovery$", "5x"); err != nil {
		return err
	}
	if scan {
		if err := bench("jobs", "^BenchmarkScan$", "3x"); err != nil {
			return err
		}
	}
	if err := bench("jobs", "^BenchmarkHeartbeat10k$", "20x"); err != nil {
		return err
	}
	if err := bench("backend", "^BenchmarkFailoverRecovery$", "5x"); err != nil {
		return err
	}
	m := machine(started, load, flagLine())
	doc := document(rs, m, rounds, contended, short)
	if err := os.WriteFile(filepath.Join(docsDir, "benchmarks.md"), []byte(doc), 0o644); err != nil {
		return err
	}
	for name, svg := range charts(rs) {
		if err := os.WriteFile(filepath.Join(docsDir, name), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(docsDir, "benchmarks-raw.txt"), raw.Bytes(), 0o644); err != nil {
		return err
	}
	progress("wrote docs/benchmarks.md in %v", time.Since(started).Round(time.Second))
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "report: "+format+"\n", args...)
}

// command runs name in dir, its stdout to out (if not nil), its stderr to
// ours only when it fails (the servers' logs are noisy).
func command(dir string, out io.Writer, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if out == nil {
		cmd.Stdout = &stderr
	}
	if err := cmd.Run(); err != nil {
		os.Stderr.Write(stderr.Bytes())
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// benchOnly passes on the lines that go test -bench prints for results,
// whole: go test writes a result line in two pieces.
type benchOnly struct {
	w       io.Writer
	partial *strings.Builder
}

func (b benchOnly) Write(p []byte) (int, error) {
	b.partial.Write(p)
	text := b.partial.String()
	end := strings.LastIndexByte(text, '\n') + 1
	for line := range strings.SplitAfterSeq(text[:end], "\n") {
		if strings.HasPrefix(line, "Benchmark") {
			_, _ = io.WriteString(b.w, line)
		}
	}
	b.partial.Reset()
	b.partial.WriteString(text[end:])
	return len(p), nil
}

func flagLine() string {
	s := "go -C bench run ./cmd/report"
	if len(os.Args) > 1 {
		s += " " + strings.Join(os.Args[1:], " ")
	}
	return s
}

// machineInfo is what the document says about where it ran.
type machineInfo struct {
	cpu, kernel, goVersion, date, command, load string
	cores                                       int
	servers                                     []string
	took                                        time.Duration
}

func machine(started time.Time, loadBefore, command string) machineInfo {
	m := machineInfo{cores: runtime.NumCPU(), date: started.UTC().Format("2006-01-02 15:04 MST"), command: command,
		took: time.Since(started).Round(time.Second), load: loadBefore + " before, " + loadavg() + " after"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.goVersion = firstLine("go", "version")
	m.servers = []string{firstLine("redis-server", "--version"), firstLine(postgresBin(), "--version"), firstLine("etcd", "--version")}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// postgresBin finds postgres as internal/testkit/testenv does: on PATH, else the
// newest /usr/lib/postgresql/*/bin.
func postgresBin() string {
	if p, err := exec.LookPath("postgres"); err == nil {
		return p
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(found) == 0 {
		return "postgres"
	}
	return found[len(found)-1]
}

func firstLine(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return name + ": not found"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
