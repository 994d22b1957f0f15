package timers_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/backends"
	"github.com/leasehold-go/leasehold/internal/childproc"
	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/semaphore"
	"github.com/leasehold-go/leasehold/timers"
)

func TestMain(m *testing.M) {
	childMain()
	testenv.Main(m)
}

// A host child process runs one timer on its own scheduler, with its clock
// off by TIMERS_OFFSET, for TIMERS_FOR, and prints
// "RUN <tick unix ms> <start ns> <end ns>" per run (wall clock, no offset),
// "START <tick unix ms>" when a run starts, and at the end
// "STATUS <runs> <skips> <elsewhere>".

const childEnv = "TIMERS_CHILD"

func childMain() { childproc.Main(childEnv, host) }

func host() error {
	l, err := backends.FromEnv()
	if err != nil {
		return err
	}
	env := func(k string) time.Duration { d, _ := time.ParseDuration(os.Getenv(k)); return d }
	offset, interval, run, hold := env("TIMERS_OFFSET"), env("TIMERS_INTERVAL"), env("TIMERS_FOR"), env("TIMERS_HOLD")
	conc, _ := strconv.Atoi(os.Getenv("TIMERS_CONCURRENCY"))
	var mu sync.Mutex
	say := func(format string, args ...any) { mu.Lock(); fmt.Printf(format+"\n", args...); mu.Unlock() }
	s := timers.New(l, timers.WithClock(func() time.Time { return time.Now().Add(offset) }), timers.WithShutdownTimeout(time.Second))
	fn := func(ctx context.Context) error {
		tick, _ := timers.TickFrom(ctx)
		start := time.Now()
		say("START %d", tick.At.UnixMilli())
		select { // the work: TIMERS_HOLD long, or until the slot is lost or shutdown
		case <-time.After(hold):
		case <-ctx.Done():
		}
		say("RUN %d %d %d", tick.At.UnixMilli(), start.UnixNano(), time.Now().UnixNano())
		return nil
	}
	if err := s.Add(timers.Every(os.Getenv("TIMERS_NAME"), interval, fn, timers.MaxConcurrency(conc), timers.LeaseTTL(time.Second))); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		return err
	}
	st := s.Status()[0]
	say("STATUS %d %d %d", st.Runs, st.Skips, st.Elsewhere)
	return nil
}

func startHost(t *testing.T, b backends.Backend, env ...string) *childproc.Proc {
	t.Helper()
	return childproc.Start(t, append(append(b.Env, childEnv+"=1"), env...)...)
}

type run struct {
	host       int
	tick       int64
	start, end int64
}

// hosts starts three hosts with clocks −200 ms, 0 and +200 ms off, started
// at different moments, and collects their runs and final statuses.
func threeHosts(t *testing.T, b backends.Backend, name string, interval, runFor, hold time.Duration, conc int) (runs []run, skips, elsewhere int64) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, offset := range []string{"-200ms", "0s", "200ms"} {
		h := startHost(t, b, "TIMERS_NAME="+name, "TIMERS_OFFSET="+offset, "TIMERS_INTERVAL="+interval.String(),
			"TIMERS_FOR="+(runFor-time.Duration(i)*300*time.Millisecond).String(), "TIMERS_HOLD="+hold.String(),
			"TIMERS_CONCURRENCY="+strconv.Itoa(conc))
		wg.Go(func() {
			for line := range h.Lines {
				var r run
				var rs, sk, el int64
				switch {
				case strings.HasPrefix(line, "RUN "):
					if _, err := fmt.Sscanf(line, "RUN %d %d %d", &r.tick, &r.start, &r.end); err != nil {
						t.Errorf("host %d: %q", i, line)
					}
					r.host = i
					mu.Lock()
					runs = append(runs, r)
					mu.Unlock()
				case strings.HasPrefix(line, "STATUS "):
					_, _ = fmt.Sscanf(line, "STATUS %d %d %d", &rs, &sk, &el)
					mu.Lock()
					skips += sk
					elsewhere += el
					mu.Unlock()
				case strings.HasPrefix(line, "ERROR"):
					t.Errorf("host %d: %s", i, line)
				}
			}
		})
		time.Sleep(300 * time.Millisecond) // the hosts start at different moments
	}
	wg.Wait()
	return runs, skips, elsewhere
}

// Three hosts, interval 1 s, 30 ticks: every tick runs exactly once.
func TestOncePerTickAcrossProcesses(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		runs, _, elsewhere := threeHosts(t, b, "once-"+uniq(), time.Second, 31*time.Second, 10*time.Millisecond, 1)
		perTick := map[int64][]int{}
		for _, r := range runs {
			perTick[r.tick] = append(perTick[r.tick], r.host)
		}
		ticks := make([]int64, 0, len(perTick))
		for tk, hosts := range perTick {
			ticks = append(ticks, tk)
			if len(hosts) != 1 {
				t.Errorf("tick %d ran on hosts %v", tk, hosts)
			}
		}
		sort.Slice(ticks, func(i, j int) bool { return ticks[i] < ticks[j] })
		// Between the first and the last tick run, none is missing.
		for i := 1; i < len(ticks); i++ {
			if ticks[i]-ticks[i-1] != 1000 {
				t.Errorf("no run of the ticks between %d and %d", ticks[i-1], ticks[i])
			}
		}
		if len(ticks) < 28 {
			t.Fatalf("%d ticks ran in 31 s", len(ticks))
		}
		t.Logf("%d ticks, each run once; %d claims found taken by another host", len(ticks), elsewhere)
	})
}

// MaxConcurrency(2) with runs of 2.5 intervals: never more than 2 runs at
// once across the hosts, and the busy ticks are skipped and counted.
func TestMaxConcurrencyAcrossProcesses(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		runs, skips, _ := threeHosts(t, b, "conc-"+uniq(), time.Second, 12*time.Second, 2500*time.Millisecond, 2)
		type edge struct {
			at int64
			d  int
		}
		var edges []edge
		for _, r := range runs {
			edges = append(edges, edge{r.start, 1}, edge{r.end, -1})
		}
		sort.Slice(edges, func(i, j int) bool {
			if edges[i].at == edges[j].at {
				return edges[i].d < edges[j].d
			}
			return edges[i].at < edges[j].at
		})
		n, peak := 0, 0
		for _, e := range edges {
			n += e.d
			peak = max(peak, n)
		}
		if peak > 2 {
			t.Fatalf("%d runs at once with MaxConcurrency(2)", peak)
		}
		if skips == 0 {
			t.Fatalf("no busy tick was skipped (%d runs)", len(runs))
		}
		t.Logf("%d runs, at most %d at once, %d ticks skipped", len(runs), peak, skips)
	})
}

// A runner SIGKILLed mid-run frees its slot within the slot's ttl (1 s).
func TestKilledRunnerFreesItsSlot(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		t.Parallel()
		name := "killed-" + uniq()
		h := startHost(t, b, "TIMERS_NAME="+name, "TIMERS_OFFSET=0s", "TIMERS_INTERVAL=1s", "TIMERS_FOR=1m",
			"TIMERS_HOLD=1h", "TIMERS_CONCURRENCY=1")
		h.Expect(t, "START ", 30*time.Second)
		h.Signal(t, syscall.SIGKILL)
		killed := time.Now()
		sem, err := semaphore.New(b.New(t), "timer/"+name, 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second+time.Second)
		defer cancel()
		p, err := sem.Acquire(ctx, time.Second)
		if err != nil {
			t.Fatalf("the killed runner's slot was not free within its 1 s ttl + 1 s: %v", err)
		}
		t.Logf("slot free %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
		_ = p.Release(t.Context())
	})
}

func uniq() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }
