package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// countingReleaser is a memlock Lock whose ReleaseEach counts its calls
// and handles, and waits for gate (when set) before it releases, or for
// its context's end when stall is set.
type countingReleaser struct {
	*memlock.Lock
	calls   atomic.Int32
	handles atomic.Int32
	gate    chan struct{}
	stall   atomic.Bool
}

func (c *countingReleaser) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	c.calls.Add(1)
	c.handles.Add(int32(len(hs)))
	if c.stall.Load() {
		<-ctx.Done()
		errs := make([]error, len(hs))
		for i := range errs {
			errs[i] = fmt.Errorf("%w: stalled: %w", lock.ErrUnavailable, ctx.Err())
		}
		return errs
	}
	if c.gate != nil {
		<-c.gate
	}
	return c.Lock.ReleaseEach(ctx, hs)
}

func keepMany(t *testing.T, k *lock.Keeper, n int) []*lock.Lease {
	t.Helper()
	ls := make([]*lock.Lease, n)
	for i := range ls {
		ls[i] = testkit.Must(k.TryAcquire(t.Context(), fmt.Sprint("k", i)))
	}
	return ls
}

// 1,000 Lease.Release calls that arrive while one ReleaseEach is in
// flight go in the next ReleaseEach, not in 1,000: the group commit.
func TestKeeperReleasesTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingReleaser{Lock: testkit.Must(memlock.New()), gate: make(chan struct{})}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		defer k.Close(context.Background())
		ls := keepMany(t, k, 1000)
		errs := make([]error, len(ls))
		var wg sync.WaitGroup
		wg.Go(func() { errs[0] = ls[0].Release(t.Context()) })
		synctest.Wait() // the first release is in flight, held at the gate
		for i := 1; i < len(ls); i++ {
			wg.Go(func() { errs[i] = ls[i].Release(t.Context()) })
		}
		synctest.Wait() // every other release waits for its turn
		close(c.gate)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("lease %d: %v", i, err)
			}
		}
		if c.calls.Load() != 2 || c.handles.Load() != 1000 {
			t.Fatalf("%d ReleaseEach calls of %d handles, want 2 of 1000", c.calls.Load(), c.handles.Load())
		}
		if k.Len() != 0 {
			t.Fatalf("%d leases left", k.Len())
		}
		for i := range ls {
			if h, err := c.TryAcquire(t.Context(), fmt.Sprint("k", i), time.Second); err != nil {
				t.Fatalf("k%d not free: %v", i, err)
			} else {
				_ = h.Release(t.Context())
			}
		}
	})
}

// Each Release gets its own outcome from the shared ReleaseEach.
func TestKeeperReleaseOwnOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingReleaser{Lock: testkit.Must(memlock.New()), gate: make(chan struct{})}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		defer k.Close(context.Background())
		ls := keepMany(t, k, 4)
		if _, err := c.ForceRelease(t.Context(), "k2"); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, len(ls))
		var wg sync.WaitGroup
		wg.Go(func() { errs[0] = ls[0].Release(t.Context()) })
		synctest.Wait()
		for i := 1; i < len(ls); i++ {
			wg.Go(func() { errs[i] = ls[i].Release(t.Context()) })
		}
		synctest.Wait()
		close(c.gate)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], lock.ErrLost) || errs[3] != nil {
			t.Fatalf("outcomes %v, want nil, nil, ErrLost, nil", errs)
		}
		if c.calls.Load() != 2 {
			t.Fatalf("%d ReleaseEach calls, want 2", c.calls.Load())
		}
	})
}

// A lone release goes at once, in a ReleaseEach of its own: no wait for
// company.
func TestKeeperLoneReleaseAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingReleaser{Lock: testkit.Must(memlock.New())}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		defer k.Close(context.Background())
		ls := keepMany(t, k, 2)
		start := time.Now()
		if err := ls[0].Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) != 0 || c.calls.Load() != 1 || c.handles.Load() != 1 {
			t.Fatalf("Release took %v in %d calls of %d handles; want 0 in 1 of 1", time.Since(start), c.calls.Load(), c.handles.Load())
		}
		if ls[0].Context().Err() == nil || ls[1].Context().Err() != nil || k.Len() != 1 {
			t.Fatalf("after one Release: contexts %v, %v, %d leases", ls[0].Context().Err(), ls[1].Context().Err(), k.Len())
		}
	})
}

// A Release whose ctx ends returns with its cause, whether its release is
// in flight or waits for its turn; once every caller of a stalled
// ReleaseEach gave up, its context ends; a waiting release whose ctx
// ended is not sent; a later release goes.
func TestKeeperReleaseHonoursItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingReleaser{Lock: testkit.Must(memlock.New())}
		k := testkit.Must(lock.NewKeeper(c, 30*time.Second))
		defer k.Close(context.Background())
		ls := keepMany(t, k, 3)
		c.stall.Store(true)
		defer c.stall.Store(false)
		start := time.Now()
		errs := make([]error, 2)
		took := make([]time.Duration, 2)
		var wg sync.WaitGroup
		for i, d := range []time.Duration{2 * time.Second, time.Second} {
			ctx, cancel := context.WithTimeout(t.Context(), d)
			defer cancel()
			wg.Go(func() { errs[i] = ls[i].Release(ctx); took[i] = time.Since(start) })
			synctest.Wait() // 0 in flight, then 1 waiting for its turn
		}
		wg.Wait()
		if !errors.Is(errs[0], context.DeadlineExceeded) || !errors.Is(errs[1], context.DeadlineExceeded) {
			t.Fatalf("Releases whose ctx ended: %v", errs)
		}
		if took[0] != 2*time.Second || took[1] != time.Second {
			t.Fatalf("the Releases returned after %v, want 2s and 1s (their ctx)", took)
		}
		synctest.Wait() // the stalled ReleaseEach ended with its caller
		c.stall.Store(false)
		if err := ls[2].Release(t.Context()); err != nil {
			t.Fatalf("a release after the stalled ones: %v", err)
		}
		// The first was sent (and stalled); the second's ctx had ended
		// when its turn came: it was not sent.
		if c.calls.Load() != 2 {
			t.Fatalf("%d ReleaseEach calls, want 2", c.calls.Load())
		}
	})
}

// Close releases 1,000 leases in ceil(1000/chunk) ReleaseEach calls.
func TestKeeperCloseReleasesInChunks(t *testing.T) {
	defer lock.SetKeeperReleaseChunk(300)()
	synctest.Test(t, func(t *testing.T) {
		c := &countingReleaser{Lock: testkit.Must(memlock.New())}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		ls := keepMany(t, k, 1000)
		if err := k.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if c.calls.Load() != 4 || c.handles.Load() != 1000 {
			t.Fatalf("Close: %d ReleaseEach calls of %d handles, want 4 of 1000", c.calls.Load(), c.handles.Load())
		}
		for i, l := range ls {
			if l.Context().Err() == nil {
				t.Fatalf("lease %d's context not done after Close", i)
			}
			if h, err := c.TryAcquire(t.Context(), fmt.Sprint("k", i), time.Second); err != nil {
				t.Fatalf("k%d not free after Close: %v", i, err)
			} else {
				_ = h.Release(t.Context())
			}
		}
		if k.Len() != 0 {
			t.Fatalf("%d leases after Close", k.Len())
		}
	})
}

// The group commit releases a lease's wrapper (an AfterReleaser) through
// the grant inside, and tells it.
func TestKeeperReleasesThroughAnAfterReleaser(t *testing.T) {
	c := &countingReleaser{Lock: testkit.Must(memlock.New())}
	k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
	defer k.Close(context.Background())
	var told []error
	h := testkit.Must(c.TryAcquire(t.Context(), "w", 3*time.Second))
	l := testkit.Must(k.Keep(t.Context(), after{h, &told}))
	if err := l.Release(t.Context()); err == nil || err.Error() != "after: %!w(<nil>)" {
		t.Fatalf("Release: %v", err)
	}
	if c.handles.Load() != 1 || len(told) != 1 {
		t.Fatalf("%d handles to ReleaseEach, told %v", c.handles.Load(), told)
	}
}

// A Release under way (a Hold's, waiting for its turn behind another in
// flight) when Close runs ends before Close closes the Batch and the
// release context: Close waits for it. Close cancelled the context that
// release ran under, which then was never sent: the grant stayed held
// after Close returned, and Hold returned the context's error.
func TestKeeperCloseWaitsForTheReleasesUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingReleaser{Lock: testkit.Must(memlock.New()), gate: make(chan struct{})}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		first := testkit.Must(k.TryAcquire(t.Context(), "first"))
		var wg sync.WaitGroup
		var firstErr, holdErr, closeErr error
		wg.Go(func() { firstErr = first.Release(t.Context()) })
		synctest.Wait() // first's release is in flight, held at the gate
		h := testkit.Must(c.TryAcquire(t.Context(), "held", 3*time.Second))
		wg.Go(func() { holdErr = k.Hold(t.Context(), h, func(context.Context) error { return nil }) })
		synctest.Wait() // Hold's release waits for its turn
		wg.Go(func() { closeErr = k.Close(t.Context()) })
		synctest.Wait() // Close waits for the two
		close(c.gate)
		wg.Wait()
		if firstErr != nil || holdErr != nil || closeErr != nil {
			t.Fatalf("Release %v, Hold %v, Close %v; want nil, nil, nil", firstErr, holdErr, closeErr)
		}
		for _, key := range []string{"first", "held"} {
			h, err := c.TryAcquire(t.Context(), key, time.Second)
			if err != nil {
				t.Fatalf("%q after Close returned: %v; want it released", key, err)
			}
			_ = h.Release(t.Context())
		}
	})
}

// Close's wait for the Releases under way is bounded by its ctx.
func TestKeeperCloseWaitsWithinItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingReleaser{Lock: testkit.Must(memlock.New()), gate: make(chan struct{})}
		defer close(c.gate)
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		l := testkit.Must(k.TryAcquire(t.Context(), "a"))
		go func() { _ = l.Release(context.Background()) }()
		synctest.Wait() // in flight, held at the gate
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if err := k.Close(ctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("Close with a Release stuck: %v after %v; want its ctx's deadline after 1s", err, time.Since(start))
		}
	})
}

// While Close waits for a renewal round that does not answer (a driver
// stuck whatever its context), the leases it is closing are still
// watched: one whose ValidUntil passes ends with ErrLost, as it would
// without Close. Close took them out of the Keeper first, and their
// contexts stayed alive past ValidUntil, while another owner could take
// their keys.
func TestKeeperCloseKeepsWatchingItsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &countingBatcher{Lock: testkit.Must(memlock.New()), hung: make(chan struct{})}
		k := testkit.Must(lock.NewKeeper(c, 3*time.Second))
		a := testkit.Must(k.TryAcquire(t.Context(), "a"))
		time.Sleep(time.Second + time.Millisecond) // the first round is in flight, hung
		closed := make(chan error, 1)
		go func() { closed <- k.Close(context.Background()) }()
		synctest.Wait() // Close waits for the round
		time.Sleep(time.Until(a.ValidUntil()) + time.Millisecond)
		synctest.Wait()
		if !errors.Is(a.Err(), lock.ErrLost) || a.Context().Err() == nil {
			t.Errorf("%v past its ValidUntil without a renewal: Err %v, context %v; want ErrLost", time.Since(a.ValidUntil()), a.Err(), a.Context().Err())
		}
		close(c.hung)
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}
