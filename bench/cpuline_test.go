package bench

import (
	"fmt"
	"runtime/metrics"
	"strings"
	"syscall"
	"time"
)

// cpuLine samples, every 10 ms, the CPU time of this process
// (getrusage) and of the Redis server's process (/proc/<pid>/schedstat,
// with the time it waited for a CPU), to show by phase of the second how
// many of the machine's cores each used: at aligned instants, whether the
// server competes with the schedulers' process for the CPU.
type cpuLine struct {
	pid     int
	stop    chan struct{}
	done    chan struct{}
	samples []cpuSample
}

type cpuSample struct {
	at                 time.Time
	self, server, wait time.Duration
	gcs                uint64 // this process's GC cycles so far
}

func startCPULine(pid int) *cpuLine {
	c := &cpuLine{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			st := schedstat(pid)
			gc := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
			metrics.Read(gc)
			c.samples = append(c.samples, cpuSample{time.Now(),
				time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(st[0]), time.Duration(st[1]), gc[0].Value.Uint64()})
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
		}
	}()
	return c
}

// summary: the cores used in each 100 ms of the second, averaged over the
// whole seconds from first to last.
func (c *cpuLine) summary(first, last time.Time) []string {
	close(c.stop)
	<-c.done
	const bucket = 100 * time.Millisecond
	n := int(time.Second / bucket)
	self, server, wait, span := make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
	for i := 1; i < len(c.samples); i++ {
		a, b := c.samples[i-1], c.samples[i]
		if a.at.Before(first) || b.at.After(last.Add(time.Second)) {
			continue
		}
		k := int(a.at.Sub(a.at.Truncate(time.Second)) / bucket)
		self[k] += b.self - a.self
		server[k] += b.server - a.server
		wait[k] += b.wait - a.wait
		span[k] += b.at.Sub(a.at)
	}
	// And by second of the window: the cores used in each.
	var bySec strings.Builder
	for sec := first; !sec.After(last); sec = sec.Add(time.Second) {
		var self, server, wait, span time.Duration
		var gcs uint64
		for i := 1; i < len(c.samples); i++ {
			a, b := c.samples[i-1], c.samples[i]
			if a.at.Before(sec) || !a.at.Before(sec.Add(time.Second)) {
				continue
			}
			self, server, wait, span = self+b.self-a.self, server+b.server-a.server, wait+b.wait-a.wait, span+b.at.Sub(a.at)
			gcs += b.gcs - a.gcs
		}
		if span > 0 {
			fmt.Fprintf(&bySec, " %d:%.2f/%.2f/%.2f/%d", int(sec.Sub(first)/time.Second), self.Seconds()/span.Seconds(), server.Seconds()/span.Seconds(), wait.Seconds()/span.Seconds(), gcs)
		}
	}
	var sb strings.Builder
	for k := range n {
		if span[k] == 0 {
			continue
		}
		fmt.Fprintf(&sb, " %d:%.2f/%.2f/%.2f", k*100, self[k].Seconds()/span[k].Seconds(), server[k].Seconds()/span[k].Seconds(), wait[k].Seconds()/span[k].Seconds())
	}
	return []string{"cores used by ms of the second (this process / the server / the server waiting for a CPU):" + sb.String(),
		"cores used by second of the window (the same, and this process's GC cycles):" + bySec.String()}
}
