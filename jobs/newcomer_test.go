package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/stacks"
	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// The tests of issue 16: what a newcomer's first program meets.

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = append(h.all, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// find returns the attributes of the first record with message msg.
func (h *records) find(msg string) (map[string]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.all {
		if r.Message != msg {
			continue
		}
		attrs := map[string]string{"level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		return attrs, true
	}
	return nil, false
}

// atLeast lists the messages logged at level or above.
func (h *records) atLeast(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.all {
		if r.Level >= level {
			out = append(out, r.Level.String()+" "+r.Message)
		}
	}
	return out
}

// The shape users write first: a worker that Tracks its jobs and never
// calls Run, and a recoverer that calls Scan under an election of its own.
// A job longer than the ttl is kept alive by the heartbeats Track starts:
// not requeued, its context not cancelled, its done accepted. (It was
// requeued at the ttl while still running, and done returned ErrStale.)
func TestTrackHeartbeatsWithoutRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		worker := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(250*time.Millisecond))
		recoverer := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(250*time.Millisecond))
		ctx, stop := context.WithCancel(t.Context())
		scanning := make(chan struct{})
		go func() {
			defer close(scanning)
			for ctx.Err() == nil {
				recoverer.Scan(ctx)
				time.Sleep(100 * time.Millisecond)
			}
		}()
		jctx, done, err := worker.Track(t.Context(), jobs.Job{ID: "long", Payload: []byte("2.5 s of work")})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // the work
		stop()
		<-scanning
		if q.len() != 0 {
			t.Fatalf("a running job was requeued: %+v", q.jobs)
		}
		if cause := context.Cause(jctx); cause != nil {
			t.Fatalf("the running job's context ended: %v", cause)
		}
		if err := done(nil); err != nil {
			t.Fatalf("done: %v", err)
		}
	})
}

// WithTTL alone works: the heartbeat and scan intervals follow the ttl
// (ttl/4, ttl/3) unless they are set, and an explicit one wins. (WithTTL(1s)
// alone failed: the default heartbeat, 4 s, was above a third of it.)
func TestIntervalsFollowTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		for _, tc := range []struct {
			opts            []jobs.Option
			heartbeat, scan string
		}{
			{[]jobs.Option{jobs.WithTTL(time.Second)}, "250ms", "333.333333ms"},
			{[]jobs.Option{jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(100 * time.Millisecond)}, "100ms", "333.333333ms"},
			{[]jobs.Option{jobs.WithScanInterval(time.Second), jobs.WithTTL(3 * time.Second)}, "750ms", "1s"},
			{nil, jobs.DefaultHeartbeatInterval.String(), jobs.DefaultScanInterval.String()},
		} {
			h := &records{}
			opts := append(tc.opts, jobs.WithCommon(lock.Common{Logger: slog.New(h)}))
			r, err := jobs.NewRunner(reg, table, func(context.Context, jobs.Job, time.Duration) error { return nil }, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(t.Context())
			stop()
			_ = r.Run(ctx)
			got, ok := h.find("leasehold: jobs runner started")
			if !ok || got["heartbeat_interval"] != tc.heartbeat || got["scan_interval"] != tc.scan {
				t.Fatalf("start-up line %v, want heartbeat_interval %s, scan_interval %s", got, tc.heartbeat, tc.scan)
			}
		}
		// A crashed worker's job under WithTTL(1s) alone is requeued within
		// ttl + ttl/3.
		var q queue
		worker := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithTTL(time.Second))
		recoverer := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithTTL(time.Second))
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		go recoverer.Run(ctx)
		crashWith(t, worker, jobs.Job{ID: "c"})
		crashed := time.Now()
		for q.len() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		if took := time.Since(crashed); took > time.Second+time.Second/3+10*time.Millisecond {
			t.Fatalf("requeued %v after the crash", took)
		}
	})
}

// WithRetryJitter bounds the jitter below the exponential schedule: 0 is
// the schedule itself, 0.25 at most a quarter below it, and full jitter
// (1) stays the default.
func TestRetryJitterIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, f := range []float64{0, 0.25} {
			reg, table := memjobs.New(), testkit.Must(memlock.New())
			delays := map[int][]time.Duration{}
			r, err := jobs.NewRunner(reg, table, func(_ context.Context, j jobs.Job, d time.Duration) error {
				delays[j.Attempt] = append(delays[j.Attempt], d)
				return nil
			}, jobs.WithRetryBackoff(time.Second, 8*time.Second), jobs.WithRetryJitter(f), jobs.WithMaxRetries(100))
			if err != nil {
				t.Fatal(err)
			}
			for prior := range 5 {
				for i := range 16 {
					if _, err := reg.Track(t.Context(), jobs.Job{ID: string(rune('a'+prior)) + string(rune('a'+i)), Attempt: prior}, time.Millisecond); err != nil {
						t.Fatal(err)
					}
				}
			}
			time.Sleep(time.Second)
			r.Scan(t.Context())
			for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 8 * time.Second} {
				low := want - time.Duration(float64(want)*f)
				if len(delays[attempt]) != 16 {
					t.Fatalf("jitter %v attempt %d: %d delays", f, attempt, len(delays[attempt]))
				}
				for _, d := range delays[attempt] {
					if d < low || d > want {
						t.Fatalf("jitter %v attempt %d: delay %v outside [%v, %v]", f, attempt, d, low, want)
					}
				}
			}
		}
		_, err := jobs.NewRunner(memjobs.New(), testkit.Must(memlock.New()), func(context.Context, jobs.Job, time.Duration) error { return nil }, jobs.WithRetryJitter(1.5))
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("WithRetryJitter(1.5): %v", err)
		}
	})
}

// slowCalls is a registry whose heartbeats and scans take a while, and
// fail when their context ends first (as a real server's calls do).
type slowCalls struct{ jobs.Registry }

func (r slowCalls) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(50 * time.Millisecond):
	}
	return r.Registry.Heartbeat(ctx, refs, lease)
}

func (r slowCalls) Expired(ctx context.Context, limit int) ([]jobs.Job, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(50 * time.Millisecond):
	}
	return r.Registry.Expired(ctx, limit)
}

// A normal shutdown of Run logs nothing at Warn (it logged "job heartbeat
// failed" and "recovery scan failed"); Run logs a start-up line with its
// settings, and a recovery names its recoverer.
func TestShutdownIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		h := &records{}
		var q queue
		r := newRunner(t, slowCalls{reg}, testkit.Must(table.Share()), &q, jobs.WithTTL(time.Second),
			jobs.WithHeartbeatInterval(100*time.Millisecond), jobs.WithScanInterval(100*time.Millisecond),
			jobs.WithCommon(lock.Common{Owner: "recoverer-1", Logger: slog.New(h)}))
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "orphan", Owner: "crashed"}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		stopped := make(chan error)
		started := time.Now()
		go func() { stopped <- r.Run(ctx) }()
		_, done, err := r.Track(t.Context(), jobs.Job{ID: "mine"})
		if err != nil {
			t.Fatal(err)
		}
		for q.len() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		// Stop in the middle of a heartbeat and of a scan (both from 100 ms
		// to 150 ms).
		time.Sleep(time.Until(started.Add(125 * time.Millisecond)))
		stop()
		if err := <-stopped; err != nil {
			t.Fatalf("Run: %v", err)
		}
		if err := done(nil); err != nil {
			t.Fatalf("done: %v", err)
		}
		if warned := h.atLeast(slog.LevelWarn); len(warned) != 0 {
			t.Fatalf("a normal shutdown logged %q", warned)
		}
		start, ok := h.find("leasehold: jobs runner started")
		if !ok || start["level"] != "INFO" || start["owner"] != "recoverer-1" || start["ttl"] != "1s" ||
			start["heartbeat_interval"] != "100ms" || start["scan_interval"] != "100ms" || start["max_retries"] != "5" {
			t.Fatalf("start-up line %v", start)
		}
		rec, ok := h.find("leasehold: job recovered")
		if !ok || rec["job"] != "orphan" || rec["from"] != "crashed" || rec["by"] != "recoverer-1" {
			t.Fatalf("recovery line %v", rec)
		}
	})
}

// heartbeatLoops counts the heartbeat loops of r that are running.
func heartbeatLoops(r *jobs.Runner) int {
	n := 0
	for _, g := range stacks.All() {
		if strings.Contains(g, fmt.Sprintf("jobs.(*Runner).heartbeats(%p", r)) {
			n++
		}
	}
	return n
}

// The heartbeat loop that Track starts ends with the last job in flight:
// when the last done returns, even in the middle of a heartbeat call, it is
// gone (it lived on until that call returned); when the last job's context
// ends without done, it ends too; and a later Track starts it again.
func TestTrackLeavesNoGoroutineBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		var q queue
		r := newRunner(t, slowCalls{reg}, testkit.Must(table.Share()), &q, jobs.WithTTL(time.Second),
			jobs.WithHeartbeatInterval(100*time.Millisecond))
		for round := range 3 {
			_, done1, err := r.Track(t.Context(), jobs.Job{ID: "one"})
			if err != nil {
				t.Fatal(err)
			}
			_, done2, err := r.Track(t.Context(), jobs.Job{ID: "two"})
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the loop has started
			if n := heartbeatLoops(r); n != 1 {
				t.Fatalf("round %d: %d heartbeat loops with two jobs in flight, want 1", round, n)
			}
			// Finish in the middle of the third heartbeat call (300 ms to
			// 350 ms).
			time.Sleep(325 * time.Millisecond)
			if err := done1(nil); err != nil {
				t.Fatal(err)
			}
			if n := heartbeatLoops(r); n != 1 {
				t.Fatalf("round %d: %d heartbeat loops with one job in flight, want 1", round, n)
			}
			if err := done2(nil); err != nil {
				t.Fatal(err)
			}
			if n := heartbeatLoops(r); n != 0 {
				t.Fatalf("round %d: %d heartbeat loops once the last job is done, want 0", round, n)
			}
		}
		// A job whose context ends without done: forgotten, and the loop
		// ends with it.
		ctx, crash := context.WithCancel(t.Context())
		if _, _, err := r.Track(ctx, jobs.Job{ID: "crashed"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(125 * time.Millisecond)
		crash()
		synctest.Wait()
		if n := heartbeatLoops(r); n != 0 {
			t.Fatalf("%d heartbeat loops after the last job's context ended, want 0", n)
		}
	})
}

// A burial names its recoverer ("by") beside the job's last owner
// ("from"), as a recovery does.
func TestDeadLineNamesTheRecoverer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg, table := memjobs.New(), testkit.Must(memlock.New())
		h := &records{}
		var q queue
		r := newRunner(t, reg, testkit.Must(table.Share()), &q, jobs.WithMaxRetries(0),
			jobs.WithCommon(lock.Common{Owner: "recoverer-1", Logger: slog.New(h)}))
		if _, err := reg.Track(t.Context(), jobs.Job{ID: "poison", Owner: "crashed"}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		if n := r.Scan(t.Context()); n != 0 {
			t.Fatalf("Scan requeued %d, want the job buried", n)
		}
		dead, ok := h.find("leasehold: job moved to the dead set")
		if !ok || dead["level"] != "WARN" || dead["job"] != "poison" || dead["from"] != "crashed" || dead["by"] != "recoverer-1" {
			t.Fatalf("dead line %v", dead)
		}
	})
}
