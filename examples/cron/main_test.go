package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestCron(t *testing.T) {
	check(t, "mem://cron-test", 2)
	check(t, "mem://cron-test-3", 3)
}

// The same on every real backend, through -backend.
func TestCronOnEveryBackend(t *testing.T) {
	urls := map[string]func() string{
		"redis":    func() string { return "redis://" + testenv.Redis(t).Addr() },
		"postgres": func() string { return testenv.Postgres(t).DSN() },
		"etcd":     func() string { return "etcd://" + strings.Join(testenv.Etcd(t).Endpoints(), ",") },
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, url(), 2)
		})
	}
}

// check runs three hosts for 4.5 s and checks both models: every report
// tick ran on one host; every warm-cache tick on at most runsPerTick
// hosts, all of them distinct, and on exactly runsPerTick for the ticks
// that every host reached in time (all but at most the first), with never
// more than runsPerTick runs at once; slow-export never more than 2 at
// once.
func check(t *testing.T, url string, runsPerTick int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4500*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	c := config{url: url, hosts: 3, runsPerTick: runsPerTick, prefix: fmt.Sprintf("test-%d/", time.Now().UnixNano())}
	if err := run(ctx, &out, c); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	hosts := map[string]map[string][]string{} // timer → tick → hosts
	running, peak := map[string]int{}, map[string]int{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[3] != "tick" {
			continue
		}
		host, timer, tick := f[1], f[2], f[4]
		switch f[5] {
		case "starts":
			if hosts[timer] == nil {
				hosts[timer] = map[string][]string{}
			}
			hosts[timer][tick] = append(hosts[timer][tick], host)
			running[timer]++
			peak[timer] = max(peak[timer], running[timer])
		default: // done, stopped
			running[timer]--
		}
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format+"\n%s", append(args, out.String())...)
	}
	if len(hosts["report"]) < 3 {
		fail("%d report ticks ran, want at least 3", len(hosts["report"]))
	}
	for tick, hs := range hosts["report"] {
		if len(hs) != 1 {
			fail("report tick %s ran on %v, want once", tick, hs)
		}
	}
	full := 0
	for tick, hs := range hosts["warm-cache"] {
		seen := map[string]bool{}
		for _, h := range hs {
			if seen[h] {
				fail("warm-cache tick %s ran twice on %s", tick, h)
			}
			seen[h] = true
		}
		if len(hs) > runsPerTick {
			fail("warm-cache tick %s ran on %v, more than %d", tick, hs, runsPerTick)
		}
		if len(hs) == runsPerTick {
			full++
		}
	}
	if full < len(hosts["warm-cache"])-1 || full < 3 {
		fail("%d of %d warm-cache ticks ran on %d hosts, want all but at most the first, and at least 3", full, len(hosts["warm-cache"]), runsPerTick)
	}
	if peak["warm-cache"] > runsPerTick || peak["slow-export"] > 2 {
		fail("runs at once at the peak: %v; want warm-cache at most %d, slow-export at most 2", peak, runsPerTick)
	}
}
