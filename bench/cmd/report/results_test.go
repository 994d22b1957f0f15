package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the neighbour, as the report's binary
// is (startNeighbour runs os.Executable).
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == neighbourArg {
		neighbourMain()
		return
	}
	os.Exit(m.Run())
}

func TestParseAndMedian(t *testing.T) {
	out := `goos: linux
BenchmarkUncontended/redis/floor-2          	   12000	     95000 ns/op	   500 B/op	  10 allocs/op
BenchmarkUncontended/redis/floor-2          	   12000	     97000 ns/op	   500 B/op	  10 allocs/op
BenchmarkUncontended/redis/floor-2          	   12000	     99000 ns/op	   500 B/op	  10 allocs/op
BenchmarkHandoff/redis/leasehold           	      50	  11571316 ns/op	      250 p50-µs	      900 p99-µs
BenchmarkHandoff/redis/leasehold-2          	      50	  11571316 ns/op	      150 p50-µs	      700 p99-µs
some log line Benchmark in the middle
PASS`
	rs := results{}
	rs.parse(strings.NewReader(out))
	if m, ok := rs.median("BenchmarkUncontended/redis/floor", "ns/op"); !ok || m != 97000 {
		t.Fatalf("median ns/op = %v, %v; want 97000", m, ok)
	}
	if m, _ := rs.median("BenchmarkHandoff/redis/leasehold", "p50-µs"); m != 200 {
		t.Fatalf("median of two = %v, want 200", m)
	}
	if n := rs.count("BenchmarkHandoff/redis/leasehold", "p99-µs"); n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
	if _, ok := rs.median("BenchmarkNothing", "ns/op"); ok {
		t.Fatal("a missing benchmark has a median")
	}
}

// The heartbeat benchmark's lines land in the document as a table.
func TestDocumentHasTheHeartbeatTable(t *testing.T) {
	rs := results{}
	rs.parse(strings.NewReader(`BenchmarkHeartbeat10k/redis-2         	      20	  57058135 ns/op	         1.000 round-trips/op
BenchmarkHeartbeat10k/postgres-2      	      20	  77198643 ns/op	         1.000 round-trips/op
`))
	doc := document(report{settings: []string{plain}, by: map[string]results{plain: rs}}, machineInfo{}, 1, 1, false)
	for _, want := range []string{"`BenchmarkHeartbeat10k`", "| redis | " + dur(57058.135) + " | 1 |", "| postgres | " + dur(77198.643) + " | 1 |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the document lacks %q", want)
		}
	}
}

// BenchmarkShapes' lines (the benchmark's own output) land in the shapes
// table, ratios included.
func TestDocumentHasTheShapesTable(t *testing.T) {
	rs := results{}
	rs.parse(strings.NewReader(`BenchmarkShapes/redis/acquire-release/shared-2  	    2000	    200000 ns/op	     168 B/op	       4 allocs/op
BenchmarkShapes/redis/acquire-release/exclusive-2         	    2000	    100000 ns/op	     152 B/op	       2 allocs/op
BenchmarkShapes/redis/group=4/all-of-2                    	    2000	    150000 ns/op	     728 B/op	      10 allocs/op
BenchmarkShapes/redis/group=4/sequential-2                	    2000	    600000 ns/op	     608 B/op	       8 allocs/op
BenchmarkShapes/redis/readers=8-2                         	    2000	      2230 ns/op	    6233 reader-grants/s	    240 writer-grants/s	         12.058 writer-max-wait-ms
`))
	doc := document(report{settings: []string{plain}, by: map[string]results{plain: rs}}, machineInfo{}, 1, 1, false)
	want := "| redis | " + dur(200) + " (168 B, 4) | " + dur(100) + " (152 B, 2) | 2.00× | " + dur(150) + " (728 B, 10) | " + dur(600) + " (608 B, 8) | 4.00× | " +
		grouped(6233) + " | " + grouped(240) + " | 12 ms |"
	if !strings.Contains(doc, want) {
		t.Errorf("the document lacks %q:\n%s", want, doc[strings.Index(doc, "## Shared and all-of"):][:2000])
	}
}

func TestParseSettings(t *testing.T) {
	for in, want := range map[string]string{"plain,neighbour": "plain neighbour", "neighbour": "neighbour", " neighbour , plain": "neighbour plain"} {
		got, err := parseSettings(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("parseSettings(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "busy", "plain,plain"} {
		if got, err := parseSettings(in); err == nil {
			t.Errorf("parseSettings(%q) = %q, want an error", in, got)
		}
	}
}

// bothSettings is a run whose plain setting meets every Redis target of
// issue 18 and whose neighbour setting misses them.
func bothSettings() report {
	plainRS, nbRS := results{}, results{}
	plainRS.parse(strings.NewReader(`BenchmarkUncontended/redis/floor-2 	 10000	 100000 ns/op	 500 B/op	 10 allocs/op
BenchmarkUncontended/redis/leasehold-2 	 10000	 104000 ns/op	 900 B/op	 18 allocs/op
BenchmarkUncontended/redis/bsm-redislock-2 	 10000	 110000 ns/op	 2000 B/op	 34 allocs/op
BenchmarkUncontended/redis/redsync-2 	 10000	 130000 ns/op	 3000 B/op	 43 allocs/op
BenchmarkContended/redis/leasehold-2 	 1	 10000000000 ns/op	 2000 B/grant	 20.0 allocs/grant	 1.00 min-share	 8000 ops/s
BenchmarkContended/redis/bsm-redislock-2 	 1	 10000000000 ns/op	 1100 B/grant	 32.0 allocs/grant	 0.35 min-share	 6000 ops/s
BenchmarkContended/redis/bsm-redislock-10ms-2 	 1	 10000000000 ns/op	 2500 B/grant	 40.0 allocs/grant	 0.82 min-share	 7000 ops/s
BenchmarkContended/redis/redsync-2 	 1	 10000000000 ns/op	 3000 B/grant	 50.0 allocs/grant	 0.10 min-share	 100 ops/s
BenchmarkMemory/redis/lease-2 	 1	 100 ns/op	 2158 heap-B/lease	 1.000 goroutines/lease
BenchmarkMemory/redis/waiter-2 	 1	 100 ns/op	 16063 heap-B/waiter	 1.010 goroutines/waiter
`))
	nbRS.parse(strings.NewReader(`BenchmarkUncontended/redis/floor-2 	 10000	 100000 ns/op	 500 B/op	 10 allocs/op
BenchmarkUncontended/redis/leasehold-2 	 10000	 131000 ns/op	 900 B/op	 67 allocs/op
BenchmarkUncontended/redis/bsm-redislock-2 	 10000	 98000 ns/op	 2000 B/op	 34 allocs/op
BenchmarkContended/redis/leasehold-2 	 1	 10000000000 ns/op	 27000 B/grant	 630 allocs/grant	 0.90 min-share	 5375 ops/s
BenchmarkContended/redis/bsm-redislock-10ms-2 	 1	 10000000000 ns/op	 9500 B/grant	 320 allocs/grant	 0.82 min-share	 7148 ops/s
`))
	return report{
		settings: []string{plain, neighbour},
		by:       map[string]results{plain: plainRS, neighbour: nbRS},
		runs: []passInfo{
			{setting: plain, loadBefore: "0.50 0.40 0.30", loadAfter: "1.90 1.00 0.50", took: 5 * time.Minute},
			{setting: neighbour, loadBefore: "1.90 1.00 0.50", loadAfter: "3.10 2.00 1.00", took: 6 * time.Minute, neighbourCores: 0.97},
		},
	}
}

// Every target of issue 18 is a row in each setting, judged on that
// setting's figures.
func TestTargetsListEveryIssueTargetInBothSettings(t *testing.T) {
	doc := document(bothSettings(), machineInfo{}, 1, 1, false)
	for _, tg := range issueTargets {
		n := strings.Count(doc, "| "+tg.what+" | ")
		want := 2
		if tg.once {
			want = 1
		}
		if n != want {
			t.Errorf("target %q: %d rows, want %d", tg.what, n, want)
		}
	}
	for _, want := range []string{
		"| Redis uncontended acquire+release ≤ 1.05× the floor | plain | 104 µs (1.04×) | floor 100 µs | met |",
		"| Redis uncontended acquire+release ≤ 1.05× the floor | with a CPU-bound neighbour | 131 µs (1.31×) | floor 100 µs | **not met** |",
		"| Redis uncontended: no slower than the fastest peer | plain | 104 µs | bsm-redislock 110 µs | met |",
		"| Redis uncontended: no slower than the fastest peer | with a CPU-bound neighbour | 131 µs | bsm-redislock 98 µs | **not met** |",
		"| Redis uncontended: allocs/op ≤ bsm/redislock's | plain | 18 | bsm-redislock 34 | met |",
		"| Redis uncontended: allocs/op ≤ bsm/redislock's | with a CPU-bound neighbour | 67 | bsm-redislock 34 | **not met** |",
		"| plain | 8000 (1.14×) | bsm-redislock-10ms 7000 | met |",
		"| with a CPU-bound neighbour | 5375 (0.75×) | bsm-redislock-10ms 7148 | **not met** |",
		"| Redis, 16 workers: min-share ≥ 0.95 | plain | 1.00 | 0.95 | met |",
		"| Redis, 16 workers: min-share ≥ 0.95 | with a CPU-bound neighbour | 0.90 | 0.95 | **not met** |",
		"| plain | 2000 B | bsm-redislock-10ms 2500 B | met |",
		"| with a CPU-bound neighbour | 27000 B | bsm-redislock-10ms 9500 B | **not met** |",
		"| client cost, uncontended acquire+release: bytes and allocations no more than the leanest peer's (redis) | plain | 900 B, 18 allocs | bsm-redislock 2000 B; bsm-redislock 34 allocs | met |",
		"| client cost, 16 workers, per grant: bytes and allocations no more than the leanest peer's (redis) | plain | 2000 B, 20 allocs | bsm-redislock 1100 B; bsm-redislock 32 allocs | **not met** |",
		// Not measured: said so, the figure a dash.
		"| PostgreSQL uncontended ≤ 1.10× raw advisory locks | plain | — (—×) | raw-advisory — | **not measured** |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the document lacks %q", want)
		}
	}
	// The memory row is a report, measured on redis only here.
	if !strings.Contains(doc, "| plain | memlock — / —, redis 2158 B / 16063 B, postgres — / —, etcd — / — | [the table](#memory-per-held-lease-and-per-blocked-waiter) | **not measured** |") {
		t.Error("the memory row is missing or judged wrongly")
	}
	// DESIGN.md's other targets stay, below issue 18's.
	if i, j := strings.Index(doc, "etcd, 16 workers: ≥ 1.5×"), strings.Index(doc, "handoff p50 under"); i < 0 || j < i {
		t.Errorf("the handoff target is missing or above issue 18's (%d, %d)", i, j)
	}
}

// Every latency and throughput table has a table per setting, with bytes
// and allocations; the run's setting, load and neighbour are recorded.
func TestDocumentTablesPerSetting(t *testing.T) {
	doc := document(bothSettings(), machineInfo{}, 1, 1, false)
	for _, want := range []string{
		"| redis | leasehold | 104 | 1.04 | 900 | 18 |",
		"| redis | leasehold | 131 | 1.31 | 900 | 67 |",
		"| redis | leasehold | 8000 | 1.00 | 2000 | 20.0 |",
		"| redis | leasehold | 5375 | 0.90 | 27000 | 630.0 |",
		"| plain | 0.50 0.40 0.30 | 1.90 1.00 0.50 | 5m0s | — |",
		"| with a CPU-bound neighbour | 1.90 1.00 0.50 | 3.10 2.00 1.00 | 6m0s | 0.97 cores |",
		"| redis | 2158 B | 1.00 | 16063 B | 1.01 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the document lacks %q", want)
		}
	}
	for _, section := range []string{"## Uncontended", "## 16 workers", "## Handoff", "## Semaphore", "## Replicated"} {
		rest := doc[strings.Index(doc, section):]
		rest = rest[:strings.Index(rest[3:], "\n## ")+3]
		if !strings.Contains(rest, "### Plain") || !strings.Contains(rest, "### With a CPU-bound neighbour") {
			t.Errorf("section %s lacks a table per setting", section)
		}
	}
	if svg := charts(bothSettings())["benchmarks-uncontended.svg"]; !strings.Contains(svg, "with a CPU-bound neighbour") {
		t.Error("the uncontended chart has no neighbour series")
	}
}

// The neighbour keeps a core busy, and ends both when stopped and when
// the report's end of its standard input closes (the report died).
func TestNeighbour(t *testing.T) {
	n, err := startNeighbour(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Its CPU time (utime, /proc/pid/stat field 14, in clock ticks of
	// 10 ms) reaches 0.2 s.
	for deadline := time.Now().Add(30 * time.Second); ; {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(n.cmd.Process.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if ticks, _ := strconv.Atoi(f[11]); ticks >= 20 {
			break
		}
		if time.Now().After(deadline) {
			n.stop()
			t.Fatalf("the neighbour used %s ticks of CPU in 30 s", f[11])
		}
		<-time.After(10 * time.Millisecond) // polling with a bound
	}
	cores := n.stop()
	if n.cmd.ProcessState == nil || cores <= 0 {
		t.Fatalf("after stop: state %v, cores %v", n.cmd.ProcessState, cores)
	}

	n, err = startNeighbour(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = n.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the neighbour ended with %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		t.Fatal("the neighbour still runs 30 s after its standard input closed")
	}
}

// The README's figures are in the document, in the README's words, per
// setting.
func TestReadmeFigures(t *testing.T) {
	doc := document(bothSettings(), machineInfo{}, 1, 1, false)
	rest := doc[strings.Index(doc, "## Figures for the README"):]
	for _, want := range []string{
		"| TryAcquire + Release | 104 µs (1.04× the raw SET NX + compare-delete floor; 18 allocs) |",
		"| TryAcquire + Release | 131 µs (1.31× the raw SET NX + compare-delete floor; 67 allocs) |",
		"| 16 workers on one key: grants/s, least productive worker's share | 8,000, 1.00 (bsm/redislock: 6,000, 0.35; with 10 ms polling 7,000, 0.82) |",
		"| 16 workers on one key: grants/s, least productive worker's share | 5,375, 0.90 (bsm/redislock: —, —; with 10 ms polling 7,148, 0.82) |",
	} {
		if !strings.Contains(rest, want) {
			t.Errorf("the README figures lack %q", want)
		}
	}
	if want := "| 2.1 KB + 1.00 goroutines / 15.7 KB + 1.01 goroutines | — + — / — + — |"; !strings.Contains(rest, want) {
		t.Errorf("the README figures lack the memory row %q", want)
	}
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 8383.4: "8,383", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := grouped(v); got != want {
			t.Errorf("grouped(%v) = %q, want %q", v, got, want)
		}
	}
}
