package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
	"github.com/leasehold-go/leasehold/timers"
)

// timersScale is the number of timers and the span of BenchmarkTimersAtScale:
// 10,000 and 60 s (1,000 and 4 s under -short), or
// LEASEHOLD_TIMERS_SCALE="<timers>,<span>" (for example "1000,10s").
func timersScale(b *testing.B) (int, time.Duration) {
	n, span := workload(10000, 1000), workload(60*time.Second, 4*time.Second)
	if v := os.Getenv("LEASEHOLD_TIMERS_SCALE"); v != "" {
		var s string
		if _, err := fmt.Sscanf(v, "%d,%s", &n, &s); err != nil {
			b.Fatalf("LEASEHOLD_TIMERS_SCALE=%q: %v", v, err)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		span = d
	}
	return n, span
}

// BenchmarkTimersAtScale: three schedulers on Redis, each with its own
// client and Lock, run the same 10,000 timers ticking every second for
// 60 s: "aligned", all due at the same instant each second (the case
// where claims go together), and "spread", with WithSpreadStart (the
// ticks spread over the second). Every run is recorded; over the whole
// seconds of the span, each (timer, tick) must have run exactly once:
// reports dup-runs and missed (with the skips by reason, from Status, in
// the log), the round trips each scheduler made per second (every command
// or pipeline its client sent: the claims, the slots, the releases, the
// renewals and the size checks; per instant when aligned) and its server
// calls (the commands, a pipeline's counted one by one), the latest run's
// start after its tick in each second (last-start-p50-ms over the
// seconds, last-start-max-ms), and meanwhile the PING latency of another
// client: from a process of its own (probe-p50-ms, probe-p99-ms: what the
// server's other clients see) and from this process
// (inproc-probe-p50-ms, inproc-probe-p99-ms: that plus the waits of this
// process's Go scheduler, which the schedulers' runs keep busy). On
// stderr, what tells where slow pings come from: the server's long calls
// (SLOWLOG), its CPU time and its time waiting for a CPU, this process's
// goroutines' waits for the Go scheduler, when each kind of script went
// out and came back in the second, the cores each process used, and when
// in the second the slow pings were sent. Run with -benchtime 1x.
func BenchmarkTimersAtScale(b *testing.B) {
	for _, spread := range []bool{false, true} {
		name := map[bool]string{false: "aligned", true: "spread"}[spread]
		b.Run(name, func(b *testing.B) { timersAtScale(b, spread) })
	}
}

func timersAtScale(b *testing.B, spread bool) {
	n, span := timersScale(b)
	addr := testenv.Redis(b).Addr()
	var opts []timers.Option
	per := "instant"
	if spread {
		opts, per = append(opts, timers.WithSpreadStart()), "s"
	}
	for b.Loop() {
		prefix := uniqueKey("scale")
		var mu sync.Mutex
		ran := make(map[[2]int64]int, n*int(span/time.Second))
		lastStart := map[int64]time.Duration{} // by tick second: the latest run's start after its tick
		fn := func(i int) func(context.Context) error {
			return func(ctx context.Context) error {
				tick, _ := timers.TickFrom(ctx)
				late := time.Since(tick.At)
				mu.Lock()
				ran[[2]int64{int64(i), tick.At.Unix()}]++
				if sec := tick.At.Unix(); late > lastStart[sec] {
					lastStart[sec] = late
				}
				mu.Unlock()
				return nil
			}
		}
		quiet := lock.Common{Logger: slog.New(slog.DiscardHandler)}
		if os.Getenv("LEASEHOLD_TIMERS_SCALE_LOG") != "" {
			quiet.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		const hosts = 3
		var schedulers []*timers.Scheduler
		var counts []*roundTrips
		tl := &timeline{}
		for h := range hosts {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = c.Close() })
			rt := &roundTrips{}
			c.AddHook(rt)
			c.AddHook(tl.hook(h))
			l, err := redislock.New(c, redislock.WithCommon(quiet))
			if err != nil {
				b.Fatal(err)
			}
			s, err := timers.New(l, timers.WithCommon(quiet))
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := s.Add(timers.Every(prefix+"/"+strconv.Itoa(i), time.Second, fn(i), opts...)); err != nil {
					b.Fatal(err)
				}
			}
			schedulers = append(schedulers, s)
			counts = append(counts, rt)
		}
		// The window: the whole seconds from the first after the start.
		first := time.Now().Truncate(time.Second).Add(2 * time.Second)
		last := first.Add(span - time.Second)
		// Run until every tick of the window has been reached (spread:
		// up to a second after its whole second).
		ctx, cancel := context.WithDeadline(context.Background(), last.Add(1500*time.Millisecond))
		probe := newRedis(b, addr)
		stopProbe := startProbeStats(b, func(ctx context.Context) error { return probe.Ping(ctx).Err() })
		stopChild := startProbeProcess(b, addr)
		diag := startServerDiag(b, addr, 500*time.Microsecond)
		cpu := startCPULine(diag.pid)
		var wg sync.WaitGroup
		for _, s := range schedulers {
			wg.Go(func() { _ = s.Run(ctx) })
		}
		<-time.After(time.Until(first.Add(-100 * time.Millisecond)))
		var before [hosts][2]int64
		for i, rt := range counts {
			before[i][0], before[i][1] = rt.snapshot()
		}
		<-time.After(time.Until(last.Add(900 * time.Millisecond)))
		var trips, calls int64
		for i, rt := range counts {
			r, c := rt.snapshot()
			trips, calls = trips+r-before[i][0], calls+c-before[i][1]
		}
		wg.Wait()
		cancel()
		inProc, child := stopProbe(), stopChild()
		// The diagnostics go to stderr: a benchmark's log keeps its first
		// lines only.
		diagLines := append(append(append(diag.stop(b), tl.summary(first, last, !spread)...), cpu.summary(first, last)...),
			fmt.Sprintf("probe, this process: %d pings, p50 %v, p99 %v, max %v; the slow ones (≥ %v) by when in the second: %s", inProc.n, inProc.p50, inProc.p99, inProc.max, slowPing, phases(inProc.slow)),
			fmt.Sprintf("probe, a process of its own: %d pings, p50 %v, p99 %v, max %v; the slow ones (≥ %v) by when in the second: %s", child.n, child.p50, child.p99, child.max, slowPing, phases(child.slow)))
		for _, line := range diagLines {
			fmt.Fprintf(os.Stderr, "%s: %s\n", b.Name(), line)
		}

		mu.Lock()
		var starts []time.Duration // of each whole second of the window: its latest run's start after the tick
		for t := first; !t.After(last); t = t.Add(time.Second) {
			starts = append(starts, lastStart[t.Unix()])
		}
		slices.Sort(starts)
		var dups, missed, runs int64
		perSecond := make([]int64, int(span/time.Second)) // missed ticks by second of the window
		for i := range n {
			for t := first; !t.After(last); t = t.Add(time.Second) {
				switch k := ran[[2]int64{int64(i), t.Unix()}]; {
				case k == 0:
					missed++
					perSecond[int(t.Sub(first)/time.Second)]++
				case k > 1:
					dups += int64(k - 1)
				}
				runs++
			}
		}
		mu.Unlock()
		skips := map[string]int64{}
		for _, s := range schedulers {
			for _, st := range s.Status() {
				if st.Skips > 0 {
					skips[st.LastSkip.Reason] += st.Skips
				}
			}
		}
		instants := float64(span / time.Second)
		b.Logf("%d timers × %d ticks: %d missed, %d dup runs; skips (by each timer's last reason) %v; missed by second %v", n, int(instants), missed, dups, skips, perSecond)
		b.ReportMetric(float64(dups), "dup-runs")
		b.ReportMetric(float64(missed), "missed")
		b.ReportMetric(float64(runs), "ticks")
		b.ReportMetric(float64(trips)/hosts/instants, "round-trips/"+per)
		b.ReportMetric(float64(calls)/hosts/instants, "server-calls/"+per)
		b.ReportMetric(float64(child.p50)/float64(time.Millisecond), "probe-p50-ms")
		b.ReportMetric(float64(child.p99)/float64(time.Millisecond), "probe-p99-ms")
		b.ReportMetric(float64(inProc.p50)/float64(time.Millisecond), "inproc-probe-p50-ms")
		b.ReportMetric(float64(inProc.p99)/float64(time.Millisecond), "inproc-probe-p99-ms")
		b.ReportMetric(float64(starts[len(starts)/2])/float64(time.Millisecond), "last-start-p50-ms")
		b.ReportMetric(float64(starts[len(starts)-1])/float64(time.Millisecond), "last-start-max-ms")
	}
}
