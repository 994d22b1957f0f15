package timers_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/timers"
)

// On PostgreSQL a grant holds a pooled connection until it ends. Tick
// claims used to be grants left to lapse after the interval plus the
// misfire threshold, so every timer held a connection all the time and a
// scheduler with more timers than pool connections stalled (and each tick
// opened a new connection, 8 ms of BenchmarkTick's 8.4 ms start latency).
// Claims go through lock.Claim now, which on pglock holds none: six
// timers run every tick on a pool of two connections.
func TestTickClaimsHoldNoConnection(t *testing.T) {
	ctx := t.Context()
	l, err := pglock.NewFromDSN(ctx, testenv.Postgres(t).DSN()+"&pool_max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	s := timers.New(l)
	const n, interval, span = 6, 100 * time.Millisecond, 2 * time.Second
	var runs [n]atomic.Int64
	for i := range n {
		if err := s.Add(timers.Every(fmt.Sprintf("pool-%s-%d", uniq(), i), interval, func(context.Context) error {
			runs[i].Add(1)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, span)
	defer cancel()
	if err := s.Run(rctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		// About 20 ticks; misfires on a loaded machine may take a few.
		if got := runs[i].Load(); got < int64(span/interval)/2 {
			t.Errorf("timer %d ran %d times in %v at %v, want about %d", i, got, span, interval, span/interval)
		}
	}
	for _, st := range s.Status() {
		if st.LastSkip.Reason == "unavailable" {
			t.Errorf("timer %s skipped a tick as unavailable: %+v", st.Name, st.LastSkip)
		}
	}
}
