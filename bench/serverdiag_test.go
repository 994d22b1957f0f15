package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverDiag records what a Redis server (on this machine) and this
// process did over a window, to tell where a latency probe's slow pings
// come from: the server's long calls (SLOWLOG over slowCall, the LATENCY
// monitor's "command" event, INFO commandstats), the server's CPU time
// and the time its process waited for a CPU (/proc/<pid>/schedstat), and
// how long this process's goroutines waited for the Go scheduler
// (runtime/metrics /sched/latencies:seconds).
type serverDiag struct {
	c        *redis.Client
	pid      int
	start    time.Time
	cpu0     float64 // the server's CPU seconds (INFO cpu)
	run0     [2]int64
	sched0   *metrics.Float64Histogram
	saved    map[string]string // the server's settings changed, to restore
	slowCall time.Duration
}

const schedLatencies = "/sched/latencies:seconds"

// startServerDiag starts recording on the server at addr: it resets the
// server's SLOWLOG (keeping calls of slowCall or more), LATENCY and
// command statistics.
func startServerDiag(b testing.TB, addr string, slowCall time.Duration) *serverDiag {
	b.Helper()
	ctx := context.Background()
	d := &serverDiag{c: redis.NewClient(&redis.Options{Addr: addr}), saved: map[string]string{}, slowCall: slowCall}
	b.Cleanup(func() { _ = d.c.Close() })
	set := map[string]string{
		"slowlog-log-slower-than":   strconv.FormatInt(slowCall.Microseconds(), 10),
		"slowlog-max-len":           "100000",
		"latency-monitor-threshold": "1",
	}
	for k, v := range set {
		old, err := d.c.ConfigGet(ctx, k).Result()
		if err != nil {
			b.Fatal(err)
		}
		d.saved[k] = old[k]
		if err := d.c.ConfigSet(ctx, k, v).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, cmd := range [][]any{{"slowlog", "reset"}, {"latency", "reset"}, {"config", "resetstat"}} {
		if err := d.c.Do(ctx, cmd...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	info := d.info(b, "server", "cpu")
	d.pid, _ = strconv.Atoi(info["process_id"])
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", d.pid)); err != nil || !strings.HasPrefix(string(comm), "redis-server") {
		d.pid = -1 // not a process of this machine
	}
	d.cpu0 = cpuSeconds(info)
	d.run0 = schedstat(d.pid)
	d.sched0 = goSchedLatencies()
	d.start = time.Now()
	return d
}

// info reads INFO sections.
func (d *serverDiag) info(b testing.TB, sections ...string) map[string]string {
	text, err := d.c.Info(context.Background(), sections...).Result()
	if err != nil {
		b.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.SplitSeq(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

func cpuSeconds(info map[string]string) float64 {
	u, _ := strconv.ParseFloat(info["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(info["used_cpu_sys"], 64)
	return u + s
}

// schedstat is a process's time on a CPU and its time runnable waiting
// for one, in ns (its main thread's: Redis runs commands on it).
func schedstat(pid int) [2]int64 {
	if pid <= 0 {
		return [2]int64{}
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return [2]int64{-1, -1}
	}
	var r [2]int64
	f := strings.Fields(string(raw))
	for i := range min(2, len(f)) {
		r[i], _ = strconv.ParseInt(f[i], 10, 64)
	}
	return r
}

func goSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// quantile of the difference of two cumulative histograms (the upper
// bound of the bucket that holds it), in seconds.
func quantile(before, after *metrics.Float64Histogram, q float64) float64 {
	if before == nil || after == nil {
		return math.NaN()
	}
	counts := make([]uint64, len(after.Counts))
	var total uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= want {
			return after.Buckets[i+1]
		}
	}
	return after.Buckets[len(after.Buckets)-1]
}

// stop ends the window, restores the server's settings and returns its
// figures, as lines for the benchmark's log.
func (d *serverDiag) stop(b testing.TB) []string {
	b.Helper()
	ctx := context.Background()
	window := time.Since(d.start)
	run := schedstat(d.pid)
	sched := goSchedLatencies()
	info := d.info(b, "cpu", "commandstats")
	var out []string
	out = append(out, fmt.Sprintf("server: CPU %.0f%% of %.1f s; its process waited for a CPU %.1f%% of the time (schedstat: %.2f s runnable not running)",
		100*(cpuSeconds(info)-d.cpu0)/window.Seconds(), window.Seconds(),
		100*float64(run[1]-d.run0[1])/float64(window), float64(run[1]-d.run0[1])/1e9))
	// Every command's calls and time, the scripts' and those the scripts
	// ran (a script's time includes its commands'), by name.
	var stats []string
	for k, v := range info {
		if strings.HasPrefix(k, "cmdstat_") {
			stats = append(stats, fmt.Sprintf("server: %s %s", k, v))
		}
	}
	slices.Sort(stats)
	out = append(out, stats...)
	// SLOWLOG: the calls of slowCall or more, by script (sha) and number of keys.
	entries, err := d.c.SlowLogGet(ctx, -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	type group struct {
		n         int
		sum, most time.Duration
	}
	groups := map[string]*group{}
	for _, e := range entries {
		name := strings.ToLower(strings.Join(e.Args[:min(1, len(e.Args))], ""))
		if len(e.Args) >= 3 && strings.HasPrefix(name, "eval") {
			name += " " + e.Args[1][:min(8, len(e.Args[1]))] + " numkeys=" + e.Args[2]
		}
		g := groups[name]
		if g == nil {
			g = &group{}
			groups[name] = g
		}
		g.n++
		g.sum += e.Duration
		g.most = max(g.most, e.Duration)
	}
	names := make([]string, 0, len(groups))
	for k := range groups {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		g := groups[k]
		out = append(out, fmt.Sprintf("server: SLOWLOG ≥ %v: %s: %d calls, mean %v, longest %v", d.slowCall, k, g.n, (g.sum/time.Duration(g.n)).Round(time.Microsecond), g.most))
	}
	if lat, err := d.c.Do(ctx, "latency", "latest").Slice(); err == nil {
		for _, e := range lat {
			if f, ok := e.([]any); ok && len(f) == 4 {
				out = append(out, fmt.Sprintf("server: LATENCY %v: latest %v ms, max %v ms", f[0], f[2], f[3]))
			}
		}
	}
	out = append(out, fmt.Sprintf("this process: goroutines waited for the Go scheduler p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms",
		1e3*quantile(d.sched0, sched, 0.5), 1e3*quantile(d.sched0, sched, 0.99), 1e3*quantile(d.sched0, sched, 0.999)))
	for k, v := range d.saved {
		_ = d.c.ConfigSet(ctx, k, v).Err()
	}
	return out
}
