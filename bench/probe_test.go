package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
)

// probeInterval is how often a probe pings.
const probeInterval = time.Millisecond

// slowPing is the latency from which a probe keeps a ping's sample
// (probeStats.slow), to tell where in time the slow ones fall.
const slowPing = time.Millisecond

// probeSample is one ping: when it was sent and how long its reply took.
type probeSample struct {
	at time.Time
	d  time.Duration
}

// probeStats sums up a probe's pings.
type probeStats struct {
	n             int
	p50, p99, max time.Duration
	slow          []probeSample // the pings that took slowPing or more, in order
}

// statsOf sums up lat, the latencies of samples.
func statsOf(samples []probeSample) probeStats {
	st := probeStats{n: len(samples)}
	if len(samples) == 0 {
		return st
	}
	lat := make([]time.Duration, len(samples))
	for i, s := range samples {
		lat[i] = s.d
		if s.d >= slowPing {
			st.slow = append(st.slow, s)
		}
	}
	slices.Sort(lat)
	st.p50, st.p99, st.max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	return st
}

// probe pings every probeInterval (a ping that takes longer delays the
// next: one ping in flight at a time) until ctx ends, and returns every
// ping's sample and the first error.
func probe(ctx context.Context, ping func(ctx context.Context) error) ([]probeSample, error) {
	var (
		samples []probeSample
		fail    error
	)
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		start := time.Now()
		err := ping(ctx)
		d := time.Since(start)
		if ctx.Err() != nil {
			return samples, fail // stopped mid-ping: not a sample
		}
		if err != nil && fail == nil {
			fail = err
		}
		samples = append(samples, probeSample{start, d})
		select {
		case <-ctx.Done():
			return samples, fail
		case <-tick.C:
		}
	}
}

// startProbe measures what the server's other clients see while a
// benchmark runs: from a client of its own (ping's), in this process, it
// pings every probeInterval until stop, which returns the p50 and p99 of
// the pings' latencies. A failed ping fails b. Give it a client that
// nothing else uses: a PING (Redis) or SELECT 1 (PostgreSQL) on a
// connection of its own. A probe in this process shares its CPU and Go
// scheduler with the benchmark's work: startProbeProcess measures from a
// process of its own.
func startProbe(b testing.TB, ping func(ctx context.Context) error) (stop func() (p50, p99 time.Duration)) {
	b.Helper()
	stopStats := startProbeStats(b, ping)
	return func() (time.Duration, time.Duration) {
		st := stopStats()
		return st.p50, st.p99
	}
}

// startProbeStats is startProbe, whose stop returns every figure.
func startProbeStats(b testing.TB, ping func(ctx context.Context) error) (stop func() probeStats) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// A first ping, not counted, opens the client's connection.
	if err := ping(ctx); err != nil {
		cancel()
		b.Fatalf("latency probe: %v", err)
	}
	var (
		samples []probeSample
		fail    error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		samples, fail = probe(ctx, ping)
	}()
	var once sync.Once
	stop = func() probeStats {
		once.Do(func() { cancel(); <-done })
		if fail != nil {
			b.Fatalf("latency probe: %v", fail)
		}
		return statsOf(samples)
	}
	b.Cleanup(func() { once.Do(func() { cancel(); <-done }) })
	return stop
}

// probeEnv names the variable that starts the test binary as a probe
// process (probeMain): the Redis address it pings.
const probeEnv = "BENCH_PROBE_REDIS"

// probeMain is the body of a probe process (startProbeProcess): it pings
// the Redis server at $BENCH_PROBE_REDIS from a client of its own, prints
// READY after a first ping, and when a line (or the end of stdin) comes,
// prints "STATS <pings> <p50> <p99> <max>", then "SLOW <unix ns> <ns>"
// for each ping of slowPing or more, then "END" (durations in ns).
func probeMain() {
	childproc.Main(probeEnv, func() error {
		c := redis.NewClient(&redis.Options{Addr: os.Getenv(probeEnv), PoolSize: 1})
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ping := func(ctx context.Context) error { return c.Ping(ctx).Err() }
		if err := ping(ctx); err != nil {
			return err
		}
		go func() {
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
			cancel()
		}()
		fmt.Println("READY")
		samples, err := probe(ctx, ping)
		if err != nil {
			return err
		}
		st := statsOf(samples)
		w := bufio.NewWriter(os.Stdout)
		fmt.Fprintf(w, "STATS %d %d %d %d\n", st.n, st.p50, st.p99, st.max)
		for _, s := range st.slow {
			fmt.Fprintf(w, "SLOW %d %d\n", s.at.UnixNano(), s.d)
		}
		fmt.Fprintln(w, "END")
		return w.Flush()
	})
}

// startProbeProcess is startProbeStats from a process of its own (the
// test binary again, probeMain) that pings the Redis server at addr: its
// latencies are the server's and the machine's, not those of this
// process's Go scheduler.
func startProbeProcess(b testing.TB, addr string) (stop func() probeStats) {
	b.Helper()
	p := childproc.Start(b, probeEnv+"="+addr)
	p.Expect(b, "READY", 30*time.Second)
	var once sync.Once
	var st probeStats
	return func() probeStats {
		once.Do(func() {
			p.Send(b, "STOP")
			line := p.Expect(b, "STATS ", time.Minute)
			var p50, p99, maxd int64
			if _, err := fmt.Sscanf(line, "STATS %d %d %d %d", &st.n, &p50, &p99, &maxd); err != nil {
				b.Fatalf("probe process: %q: %v", line, err)
			}
			st.p50, st.p99, st.max = time.Duration(p50), time.Duration(p99), time.Duration(maxd)
			for line := range p.Lines {
				if line == "END" {
					break
				}
				f := strings.Fields(line)
				if len(f) != 3 || f[0] != "SLOW" {
					continue
				}
				at, err1 := strconv.ParseInt(f[1], 10, 64)
				d, err2 := strconv.ParseInt(f[2], 10, 64)
				if err1 == nil && err2 == nil {
					st.slow = append(st.slow, probeSample{time.Unix(0, at), time.Duration(d)})
				}
			}
		})
		return st
	}
}

// phases counts slow pings by when they were sent in their second (ms
// after the whole second): where the slow ones fall relative to aligned
// instants.
func phases(slow []probeSample) string {
	bounds := []int{10, 25, 50, 100, 200, 500, 1000}
	counts := make([]int, len(bounds))
	for _, s := range slow {
		ms := s.at.Nanosecond() / int(time.Millisecond)
		for i, b := range bounds {
			if ms < b {
				counts[i]++
				break
			}
		}
	}
	var sb strings.Builder
	lo := 0
	for i, b := range bounds {
		fmt.Fprintf(&sb, "[%d,%d)ms:%d ", lo, b, counts[i])
		lo = b
	}
	return strings.TrimSpace(sb.String())
}
