package timers

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// WithRetries's backoff doubles up to lock.MaxTTL and no further: it
// used to double without a bound, and a backoff that overflowed turned
// negative and retried at once.
func TestRetryBackoffStopsDoubling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gaps []time.Duration
		last := time.Now()
		fn := func(context.Context) error {
			gaps = append(gaps, time.Since(last))
			last = time.Now()
			return errors.New("boom")
		}
		tm := Every("retry", time.Hour, fn, WithRetries(4, lock.MaxTTL/2))
		if tm.err != nil {
			t.Fatal(tm.err)
		}
		e := &entry{t: tm, s: testkit.Must(New(testkit.Must(memlock.New())))}
		if err := e.call(t.Context()); err == nil {
			t.Fatal("no error")
		}
		if want := []time.Duration{0, lock.MaxTTL / 2, lock.MaxTTL, lock.MaxTTL, lock.MaxTTL}; !slices.Equal(gaps, want) {
			t.Fatalf("attempts %v apart, want %v", gaps, want)
		}
	})
}

// Every name and key derived from the longest valid timer name is accepted
// downstream: the semaphore name, its slot keys up to WithMaxConcurrency's
// largest, and the claim key of any tick a time.Time of Unix nanoseconds
// holds, up to WithRunsPerTick's largest.
func TestDerivedNamesWithinLimits(t *testing.T) {
	name := strings.Repeat("n", MaxNameLen)
	if err := checkName("timer name", name); err != nil {
		t.Fatal(err)
	}
	if err := backendkit.CheckName("semaphore name", namePrefix+name); err != nil {
		t.Fatal(err)
	}
	keys := []string{semaphore.SlotKey(namePrefix+name, 1023), claimKey(name, time.Unix(0, math.MinInt64), 1023), claimKey(name, time.Unix(0, math.MaxInt64), 1023)}
	for _, k := range keys {
		if err := lock.CheckKey(k); err != nil {
			t.Errorf("%d-byte key: %v", len(k), err)
		}
	}
	if _, err := semaphore.New(testkit.Must(memlock.New()), namePrefix+name, 1024); err != nil {
		t.Fatal(err)
	}
}

// The dispatcher's heap gives its items back earliest first, whatever
// order they came in and however their instants move (as the dispatcher
// moves the earliest timer to its next tick).
func TestTickHeapOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := make(tickHeap, 0, 1000)
	for range 1000 {
		h = append(h, heapItem{at: r.Int64N(1e6)})
	}
	h.init()
	for range 5000 { // the root moves on, as a tick does
		h[0].at += r.Int64N(1e5)
		h.down(0)
	}
	var got []int64
	for len(h) > 0 {
		got = append(got, h[0].at)
		h.popRoot()
	}
	if len(got) != 1000 || !slices.IsSorted(got) {
		t.Fatalf("%d items out of the heap, sorted %v", len(got), slices.IsSorted(got))
	}
}

// The dispatcher's grain is 5 ms, less for timers that tick more often or
// whose misfire threshold is small, none below 100 µs; instants round up
// to it, from the Unix epoch.
func TestWakeGrain(t *testing.T) {
	nop := func(context.Context) error { return nil }
	for _, c := range []struct {
		timers []*Timer
		want   time.Duration
	}{
		{[]*Timer{Every("a", time.Second, nop)}, 5 * time.Millisecond},
		{[]*Timer{Every("a", time.Second, nop), Every("b", 16*time.Millisecond, nop)}, time.Millisecond},
		{[]*Timer{Every("a", time.Second, nop, WithMisfireThreshold(2*time.Millisecond))}, 500 * time.Microsecond},
		{[]*Timer{Cron("c", "* * * * *", nop)}, 5 * time.Millisecond},
		{[]*Timer{Every("a", time.Millisecond, nop)}, 1},
	} {
		var es []*entry
		for _, tm := range c.timers {
			if tm.err != nil {
				t.Fatal(tm.err)
			}
			es = append(es, &entry{t: tm})
		}
		if got := wakeGrain(es); got != c.want {
			t.Errorf("wakeGrain of %d timers = %v, want %v", len(es), got, c.want)
		}
	}
	at := time.Unix(10, 1)
	if got, want := roundUp(at, 5*time.Millisecond), time.Unix(10, int64(5*time.Millisecond)); !got.Equal(want) {
		t.Errorf("roundUp(%v) = %v, want %v", at, got, want)
	}
	if on := time.Unix(10, 0); !roundUp(on, 5*time.Millisecond).Equal(on) {
		t.Errorf("roundUp moved an instant on the grain")
	}
	if before := time.Unix(-1, 1); !roundUp(before, time.Second).Equal(time.Unix(0, 0)) {
		t.Errorf("roundUp(%v) = %v, want the epoch", before, roundUp(before, time.Second))
	}
}

// A pool hands a function to an idle goroutine rather than start one:
// 100 functions one after the other run on one goroutine, 10 at once on
// 10. A goroutine idle for a whole period of poolIdle exits at its end
// (within 2 × poolIdle); close ends the others.
func TestPoolReusesGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool()
		var wg sync.WaitGroup
		for range 100 {
			p.Go(&wg, funcRunner(func() {}))
			wg.Wait()
			synctest.Wait() // the goroutine is idle again
		}
		if n := p.started.Load(); n != 1 {
			t.Errorf("100 functions in turn started %d goroutines, want 1", n)
		}
		release := make(chan struct{})
		for range 10 {
			p.Go(&wg, funcRunner(func() { <-release }))
		}
		close(release)
		wg.Wait()
		if n := p.started.Load(); n != 10 {
			t.Errorf("10 functions at once started %d goroutines in all, want 10", n)
		}
		time.Sleep(2*poolIdle + time.Millisecond)
		synctest.Wait()
		p.Go(&wg, funcRunner(func() {}))
		wg.Wait()
		if n := p.started.Load(); n != 11 {
			t.Errorf("after the idle time: %d goroutines started, want 11 (the idle ones exited)", n)
		}
		p.close() // ends the last one now
	})
}
