// Command report runs the comparison benchmarks of ../.. (the bench
// module) and the main module's semaphore, replica-ack, recovery-scan,
// heartbeat and failover benchmarks, sequentially, then writes
// docs/benchmarks.md (tables of medians, the targets met or not, the
// machine and its load, the command), the charts docs/benchmarks-*.svg,
// and the raw go test output docs/benchmarks-raw.txt (benchstat reads it;
// its "setting:" and "load:" lines label the results that follow).
//
// The latency and contention benchmarks run once per setting of
// -settings: plain (nothing else started) and neighbour (the command runs
// a copy of itself that keeps one core busy from the start of the pass to
// its end; it is killed then, on an error or an interrupt, and it exits
// by itself when the report dies). The rest runs once, in neither's
// company. Times on the project's 2-core machine:
//
//	go -C bench run ./cmd/report                           # both settings: about 20 minutes
//	go -C bench run ./cmd/report -settings plain           # about 11 minutes
//	go -C bench run ./cmd/report -rounds 1 -contended 1 -ticks-short -scan=false   # a quick look, both settings: about 6 minutes
//
// Latency benchmarks run in rounds: each round runs every library once, so
// that a burst of load from elsewhere on the machine hits all of them
// rather than one; the tables give the median over rounds.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == neighbourArg {
		neighbourMain()
		return
	}
	rounds := flag.Int("rounds", 5, "rounds of the latency benchmarks (uncontended, handoff, semaphore, replica acks)")
	contended := flag.Int("contended", 2, "rounds of the 16-worker contention run (10 s per library each)")
	short := flag.Bool("ticks-short", false, "shrink the long workloads as -short does (3 ticks, 1 s of contention, one kill)")
	scan := flag.Bool("scan", true, "run the main module's 1,000,000-job recovery scan benchmark (about a minute)")
	scale := flag.Bool("scale", false, "run only the scale benchmarks and rewrite only the Scale section (about 40 minutes)")
	settingsFlag := flag.String("settings", plain+","+neighbour,
		"comma-separated settings in which the latency and contention benchmarks run: "+plain+" (nothing else started), "+neighbour+" (a CPU-bound process keeps one core busy)")
	flag.Parse()
	settings, err := parseSettings(*settingsFlag)
	if err == nil && *scale {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = runScale(ctx)
		stop()
	} else if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, options{rounds: *rounds, contended: *contended, short: *short, scan: *scan, settings: settings})
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// The settings in which the latency and contention benchmarks run.
const (
	plain     = "plain"
	neighbour = "neighbour"
)

// parseSettings reads -settings: known names, each once, in the order
// given.
func parseSettings(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f != plain && f != neighbour {
			return nil, fmt.Errorf("-settings: unknown setting %q (want %s, %s or both)", f, plain, neighbour)
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("-settings: %s twice", f)
		}
		out = append(out, f)
	}
	return out, nil
}

// options are the report's flags.
type options struct {
	rounds, contended int
	short, scan       bool
	settings          []string
}

// paths: this command runs from the bench module (go -C bench run).
const (
	benchDir = "."
	rootDir  = ".."
	docsDir  = "../docs"
)

func run(ctx context.Context, o options) error {
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
		if err := command(ctx, dp[0], nil, "go", "test", "-c", "-o", filepath.Join(tmp, name+".test"), dp[1]); err != nil {
			return err
		}
	}
	var raw bytes.Buffer
	rep := report{settings: o.settings, by: map[string]results{plain: {}, neighbour: {}}}
	setting := plain // where bench puts what it parses
	bench := func(bin, pattern, benchtime string, extra ...string) error {
		progress("[%s] %s -bench %s -benchtime %s %s", setting, bin, pattern, benchtime, strings.Join(extra, " "))
		var out bytes.Buffer
		args := append([]string{"-test.run=^$", "-test.bench=" + pattern, "-test.benchtime=" + benchtime, "-test.benchmem", "-test.timeout=30m"}, extra...)
		if o.short {
			args = append(args, "-test.short")
		}
		// benchstat reads "key: value" lines as the configuration of
		// the results that follow.
		fmt.Fprintf(&raw, "setting: %s\nload: %s\n", setting, loadavg())
		dir := bins[bin][0]
		err := command(ctx, dir, io.MultiWriter(&out, benchOnly{os.Stderr, new(strings.Builder)}), filepath.Join(tmp, bin+".test"), args...)
		raw.Write(out.Bytes())
		rep.by[setting].parse(&out)
		return err
	}
	for _, s := range o.settings {
		setting = s
		r, err := pass(ctx, s, func() error { return repeated(o, bench) })
		rep.runs = append(rep.runs, r)
		if err != nil {
			return err
		}
	}
	// The rest runs once, with nothing else started.
	setting = plain
	for _, b := range []struct{ bin, pattern, benchtime string }{
		{"bench", "^BenchmarkOncePerTick$", "1x"},
		{"bench", "^BenchmarkRecovery$", "5x"},
		{"bench", "^BenchmarkMemory$", "1x"},
		{"bench", "^BenchmarkShapes$/.*/(acquire-release|group=4)", "1s"},
		{"bench", "^BenchmarkShapes$/.*/readers=8", "10s"},
		{"jobs", "^BenchmarkScan$", "3x"},
		{"jobs", "^BenchmarkHeartbeat10k$", "20x"},
		{"backend", "^BenchmarkFailoverRecovery$", "5x"},
	} {
		if b.pattern == "^BenchmarkScan$" && !o.scan {
			continue
		}
		if err := bench(b.bin, b.pattern, b.benchtime); err != nil {
			return err
		}
	}
	m := machine(started, load, flagLine())
	doc := document(rep, m, o.rounds, o.contended, o.short)
	if kept := keptScale(filepath.Join(docsDir, "benchmarks.md")); kept != "" {
		doc = strings.TrimRight(doc, "\n") + "\n\n" + kept
	}
	if err := os.WriteFile(filepath.Join(docsDir, "benchmarks.md"), []byte(doc), 0o644); err != nil {
		return err
	}
	for name, svg := range charts(rep) {
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

// repeated runs the benchmarks that run in every setting: the latency
// rounds, then the contention rounds.
func repeated(o options, bench func(bin, pattern, benchtime string, extra ...string) error) error {
	for r := 1; r <= o.rounds; r++ {
		progress("latency round %d of %d", r, o.rounds)
		for _, b := range [][3]string{
			{"bench", "^BenchmarkUncontended$", "1s"},
			{"bench", "^BenchmarkHandoff$", "50x"},
			{"semaphore", "^BenchmarkSemaphore$/.*/held=15", "1s"},
			{"redislock", "^BenchmarkReplicaAcks$", "3000x"},
		} {
			if err := bench(b[0], b[1], b[2]); err != nil {
				return err
			}
		}
	}
	for r := 1; r <= o.contended; r++ {
		progress("contention round %d of %d", r, o.contended)
		if err := bench("bench", "^BenchmarkContended$", "1x"); err != nil {
			return err
		}
	}
	return nil
}

// pass runs f in setting s: with the neighbour running throughout when s
// is neighbour. It records the load average before and after, the time
// taken and the cores the neighbour used.
func pass(ctx context.Context, s string, f func() error) (passInfo, error) {
	p := passInfo{setting: s, loadBefore: loadavg()}
	start := time.Now()
	var nb *neighbourProc
	if s == neighbour {
		var err error
		if nb, err = startNeighbour(ctx); err != nil {
			return p, err
		}
		progress("started the CPU-bound neighbour (pid %d)", nb.cmd.Process.Pid)
	}
	err := f()
	if nb != nil {
		p.neighbourCores = nb.stop()
		progress("stopped the CPU-bound neighbour: it used %.2f cores", p.neighbourCores)
	}
	p.loadAfter, p.took = loadavg(), time.Since(start).Round(time.Second)
	return p, err
}

// passInfo is what the document says about one setting's pass.
type passInfo struct {
	setting               string
	loadBefore, loadAfter string
	took                  time.Duration
	neighbourCores        float64
}

// report is everything a run measured: per setting, the results of the
// benchmarks that run in every setting; the benchmarks that run once are
// in the plain setting's results.
type report struct {
	settings []string
	by       map[string]results
	runs     []passInfo
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "report: "+format+"\n", args...)
}

// command runs name in dir, its stdout to out (if not nil), its stderr to
// ours only when it fails (the servers' logs are noisy).
// An interrupt stops it: SIGINT first, so that a test binary's cleanups
// stop its servers, then SIGKILL after 10 s.
func command(ctx context.Context, dir string, out io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
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
