package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// eachCounting is a Lock whose ReleaseEach counts its calls and the
// handles offered, refuses (ErrInvalidArgument) the handles of keys that
// start with "own/", and releases the others one by one.
type eachCounting struct {
	lock.Lock
	mu      sync.Mutex
	calls   int
	offered []string
}

func (e *eachCounting) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	e.mu.Lock()
	e.calls++
	for _, h := range hs {
		e.offered = append(e.offered, h.Key())
	}
	e.mu.Unlock()
	errs := make([]error, len(hs))
	for i, h := range hs {
		if strings.HasPrefix(h.Key(), "own/") {
			errs[i] = fmt.Errorf("%w: not mine", lock.ErrInvalidArgument)
			continue
		}
		errs[i] = h.Release(ctx)
	}
	return errs
}

// counted wraps a handle (a Wrapper, not an AfterReleaser) and counts
// its own Releases.
type counted struct {
	lock.Handle
	releases *atomic.Int32
}

func (c counted) Unwrap() lock.Handle { return c.Handle }

func (c counted) Release(ctx context.Context) error {
	c.releases.Add(1)
	return c.Handle.Release(ctx)
}

// after is an AfterReleaser that records the outcomes it was told.
type after struct {
	lock.Handle
	told *[]error
}

func (a after) Unwrap() lock.Handle { return a.Handle }

func (a after) AfterRelease(_ context.Context, err error) error {
	*a.told = append(*a.told, err)
	return fmt.Errorf("after: %w", err)
}

func TestReleaseEachOutcomesInOrder(t *testing.T) {
	ctx := t.Context()
	m := testkit.Must(memlock.New())
	e := &eachCounting{Lock: m}
	a := testkit.Must(m.TryAcquire(ctx, "a", time.Minute))
	b := testkit.Must(m.TryAcquire(ctx, "b", time.Minute))
	own := testkit.Must(m.TryAcquire(ctx, "own/c", time.Minute))
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var ownReleases atomic.Int32
	errs := lock.ReleaseEach(ctx, e, []lock.Handle{a, b, nil, counted{own, &ownReleases}})
	if errs[0] != nil || !errors.Is(errs[1], lock.ErrLost) || !errors.Is(errs[2], lock.ErrInvalidArgument) || errs[3] != nil {
		t.Fatalf("outcomes %v, want nil, ErrLost, ErrInvalidArgument, nil", errs)
	}
	// The counted wrapper is not the backend's: it went through its own
	// Release, never offered to ReleaseEach.
	if e.calls != 1 || strings.Join(e.offered, ",") != "a,b" || ownReleases.Load() != 1 {
		t.Fatalf("%d calls offered %v, %d own Releases; want 1 call of a,b and 1", e.calls, e.offered, ownReleases.Load())
	}
	for _, key := range []string{"a", "b", "own/c"} {
		h, err := m.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("%s not free after ReleaseEach: %v", key, err)
		}
		_ = h.Release(ctx)
	}
}

func TestReleaseEachFallsBackOnARefusal(t *testing.T) {
	ctx := t.Context()
	m := testkit.Must(memlock.New())
	e := &eachCounting{Lock: m}
	own := testkit.Must(m.TryAcquire(ctx, "own/x", time.Minute))
	errs := lock.ReleaseEach(ctx, e, []lock.Handle{own})
	if errs[0] != nil || e.calls != 1 {
		t.Fatalf("%v after %d calls; want nil after 1 (refused, then its own Release)", errs[0], e.calls)
	}
	if _, err := m.TryAcquire(ctx, "own/x", time.Minute); err != nil {
		t.Fatalf("own/x not released: %v", err)
	}
}

func TestReleaseEachThroughAnAfterReleaser(t *testing.T) {
	ctx := t.Context()
	m := testkit.Must(memlock.New())
	e := &eachCounting{Lock: m}
	var told []error
	h := testkit.Must(m.TryAcquire(ctx, "w", time.Minute))
	errs := lock.ReleaseEach(ctx, e, []lock.Handle{after{h, &told}})
	// The wrapped handle was released by the backend's ReleaseEach, and
	// the wrapper told the outcome, whose answer is the handle's.
	if strings.Join(e.offered, ",") != "w" || len(told) != 1 || told[0] != nil || errs[0] == nil || errs[0].Error() != "after: %!w(<nil>)" {
		t.Fatalf("offered %v, told %v, outcome %v", e.offered, told, errs[0])
	}
	errs = lock.ReleaseEach(ctx, e, []lock.Handle{after{h, &told}})
	if len(told) != 2 || !errors.Is(told[1], lock.ErrLost) || !errors.Is(errs[0], lock.ErrLost) {
		t.Fatalf("second release: told %v, outcome %v; want ErrLost", told, errs[0])
	}
}

func TestReleaseEachGeneric(t *testing.T) {
	ctx := t.Context()
	m := testkit.Must(memlock.New())
	var l lock.Lock = struct{ lock.Lock }{m} // not an EachReleaser
	hs := make([]lock.Handle, 100)
	for i := range hs {
		hs[i] = testkit.Must(l.TryAcquire(ctx, fmt.Sprint("k", i), time.Minute))
	}
	_ = hs[7].Release(ctx)
	for i, err := range lock.ReleaseEach(ctx, l, hs) {
		if (i == 7) != errors.Is(err, lock.ErrLost) || (i != 7 && err != nil) {
			t.Fatalf("handle %d: %v", i, err)
		}
	}
	for i := range hs {
		if _, err := m.TryAcquire(ctx, fmt.Sprint("k", i), time.Minute); err != nil {
			t.Fatalf("k%d not released: %v", i, err)
		}
	}
}

func TestReleaseEachRefusesBadInput(t *testing.T) {
	m := testkit.Must(memlock.New())
	h := testkit.Must(m.TryAcquire(t.Context(), "k", time.Minute))
	done, cancel := context.WithCancel(t.Context())
	cancel()
	var nilCtx context.Context
	for name, errs := range map[string][]error{
		"nil Lock":    lock.ReleaseEach(t.Context(), nil, []lock.Handle{h}),
		"nil context": lock.ReleaseEach(nilCtx, m, []lock.Handle{h}),
	} {
		if !errors.Is(errs[0], lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, errs[0])
		}
	}
	if errs := lock.ReleaseEach(done, m, []lock.Handle{h}); !errors.Is(errs[0], context.Canceled) {
		t.Errorf("done context: %v, want context.Canceled", errs[0])
	}
	if _, err := m.TryAcquire(t.Context(), "k", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("k released by a refused call: %v", err)
	}
}
