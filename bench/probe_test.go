package bench

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// probeInterval is how often startProbe pings.
const probeInterval = time.Millisecond

// startProbe measures what the server's other clients see while a
// benchmark runs: from a client of its own (ping's), it pings every
// probeInterval (a ping that takes longer delays the next: one ping in
// flight at a time) until stop, which returns the p50 and p99 of the
// pings' latencies. A failed ping fails b. Give it a client that nothing
// else uses: a PING (Redis) or SELECT 1 (PostgreSQL) on a connection of
// its own.
func startProbe(b testing.TB, ping func(ctx context.Context) error) (stop func() (p50, p99 time.Duration)) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// A first ping, not counted, opens the client's connection.
	if err := ping(ctx); err != nil {
		cancel()
		b.Fatalf("latency probe: %v", err)
	}
	var (
		mu   sync.Mutex
		lat  []time.Duration
		fail error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(probeInterval)
		defer tick.Stop()
		for {
			start := time.Now()
			err := ping(ctx)
			d := time.Since(start)
			if ctx.Err() != nil {
				return // stopped mid-ping: not a sample
			}
			mu.Lock()
			if err != nil && fail == nil {
				fail = err
			}
			lat = append(lat, d)
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() (p50, p99 time.Duration) {
		once.Do(func() { cancel(); <-done })
		mu.Lock()
		defer mu.Unlock()
		if fail != nil {
			b.Fatalf("latency probe: %v", fail)
		}
		if len(lat) == 0 {
			return 0, 0
		}
		s := slices.Sorted(slices.Values(lat))
		return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
	}
	b.Cleanup(func() { once.Do(func() { cancel(); <-done }) })
	return stop
}
