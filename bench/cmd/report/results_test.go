package main

import (
	"strings"
	"testing"
)

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
	doc := document(rs, machineInfo{}, 1, 1, false)
	for _, want := range []string{"`BenchmarkHeartbeat10k`", "| redis | " + dur(57058.135) + " | 1 |", "| postgres | " + dur(77198.643) + " | 1 |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the document lacks %q", want)
		}
	}
}
