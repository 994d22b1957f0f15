package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// releaseWakeBound is how soon a waiter blocked on a key must have the key
// after a ReleaseEach that released it: well under every poll the built-in
// backends fall back on (lock.DefaultMaxBackoff, 500 ms; a queued Redis
// waiter's 1 s), so that only the release's own notification meets it.
const releaseWakeBound = 300 * time.Millisecond

// WithReleaseChunk tells RunReleaseEach the backend's ReleaseEach chunk
// size (as its tests set it), so that the handles it checks straddle chunk
// boundaries: 2 chunks and a few more handles, the lost and foreign ones
// next to the boundaries. Without it, 100 handles.
func WithReleaseChunk(n int) Option { return func(c *config) { c.releaseChunk = n } }

// RunReleaseEach checks lock.ReleaseEach on the backend (natively when it
// is a lock.EachReleaser), as subtests of t: the outcomes of many handles
// in order, across chunks, nil for each held one and ErrLost for one
// released before, one taken away (ForceRelease, when the backend has it),
// and one that expired (whose successor is left alone); the handle of
// another instance, a wrapper the backend does not know and (on a
// lock.SharedLock) a share are released too; every released key is free
// at once; an EachReleaser refuses what it cannot release natively with
// ErrInvalidArgument and leaves it held; a waiter blocked in lock.Acquire
// on a released key, queued (lock.Queue) or subscribed (lock.Waiter), has
// the key within 300 ms (a notification, not a poll).
func RunReleaseEach(t *testing.T, newLock Factory, opts ...Option) {
	c := defaults()
	for _, o := range opts {
		o(&c)
	}
	if c.minTTL > c.ttl {
		c.ttl = c.minTTL
	}
	s := &suite{cfg: c, newLock: newLock, prefix: "locktest/" + randomID() + "/"}
	parallel(t, []subtest{
		{"Outcomes", s.releaseEachOutcomes},
		{"Expired", s.releaseEachExpired},
		{"Refused", s.releaseEachRefused},
		{"WakesQueued", s.releaseEachWakesQueued},
		{"WakesSubscribed", s.releaseEachWakesSubscribed},
	})
}

func (s *suite) releaseEachOutcomes(t *testing.T) {
	l, other := s.newLock(t), s.newLock(t)
	chunk := s.cfg.releaseChunk
	n := 100
	// Positions: released before, forced away, another instance's, an
	// unknown wrapper's, a share: around the chunk boundaries if known.
	before, forced, foreignAt, wrapAt, shareAt := 10, 55, 30, 70, 40
	if chunk > 0 {
		n = 2*chunk + 3
		before, forced, foreignAt, wrapAt, shareAt = chunk-1, chunk, 2*chunk-1, 2*chunk, 2*chunk+1
	}
	hs := make([]lock.Handle, n)
	keys := make([]string, n)
	for i := range hs {
		keys[i] = s.key(t, fmt.Sprintf("k%d", i))
		switch i {
		case foreignAt:
			hs[i] = s.mustAcquire(t, other, keys[i], s.cfg.longTTL)
		case shareAt:
			if sl, ok := l.(lock.SharedLock); ok {
				h, err := sl.TryAcquireShared(ctxFor(t, s.cfg.waitBound), keys[i], s.cfg.longTTL)
				if err != nil {
					t.Fatalf("TryAcquireShared: %v", err)
				}
				hs[i] = h
				continue
			}
			hs[i] = s.mustAcquire(t, l, keys[i], s.cfg.longTTL)
		default:
			hs[i] = s.mustAcquire(t, l, keys[i], s.cfg.longTTL)
		}
	}
	hs[wrapAt] = foreign{hs[wrapAt]}
	if err := hs[before].Release(ctxFor(t, s.cfg.waitBound)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	fr, canForce := l.(forceReleaser)
	if canForce {
		if ok, err := fr.ForceRelease(ctxFor(t, s.cfg.waitBound), keys[forced]); !ok || err != nil {
			t.Fatalf("ForceRelease: %v, %v", ok, err)
		}
	}
	errs := lock.ReleaseEach(ctxFor(t, s.cfg.waitBound), l, hs)
	if len(errs) != n {
		t.Fatalf("%d outcomes for %d handles", len(errs), n)
	}
	for i, err := range errs {
		wantLost := i == before || (canForce && i == forced)
		if wantLost != errors.Is(err, lock.ErrLost) || (!wantLost && err != nil) {
			t.Fatalf("handle %d of %d (before %d, forced %d, foreign %d, wrapper %d, share %d): %v",
				i, n, before, forced, foreignAt, wrapAt, shareAt, err)
		}
	}
	// Every key is free at once, for another instance.
	succ := s.newLock(t)
	next := make([]lock.Handle, n)
	for i, key := range keys {
		h, err := succ.TryAcquire(ctxFor(t, s.cfg.waitBound), key, s.cfg.longTTL)
		if err != nil {
			t.Fatalf("key %d not free after ReleaseEach: %v", i, err)
		}
		next[i] = h
	}
	// A second ReleaseEach is ErrLost for each, and leaves the new
	// holders alone.
	for i, err := range lock.ReleaseEach(ctxFor(t, s.cfg.waitBound), l, hs) {
		if !errors.Is(err, lock.ErrLost) {
			t.Fatalf("second ReleaseEach: handle %d: %v, want ErrLost", i, err)
		}
	}
	for i, err := range lock.ReleaseEach(ctxFor(t, s.cfg.waitBound), succ, next) {
		if err != nil {
			t.Fatalf("the new holder's grant %d after the old handles' ReleaseEach: %v", i, err)
		}
	}
	if errs := lock.ReleaseEach(ctxFor(t, s.cfg.waitBound), l, nil); len(errs) != 0 {
		t.Fatalf("ReleaseEach of no handles: %v", errs)
	}
}

func (s *suite) releaseEachExpired(t *testing.T) {
	l, succ := s.newLock(t), s.newLock(t)
	short := []string{s.key(t, "a"), s.key(t, "c")}
	ha := s.mustAcquire(t, l, short[0], s.cfg.ttl)
	hb := s.mustAcquire(t, l, s.key(t, "b"), s.cfg.longTTL)
	hc := s.mustAcquire(t, l, short[1], s.cfg.ttl)
	start := time.Now()
	var next []lock.Handle
	for _, key := range short {
		for {
			h, err := succ.TryAcquire(ctxFor(t, s.cfg.waitBound), key, s.cfg.longTTL)
			if err == nil {
				next = append(next, h)
				break
			}
			if !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("TryAcquire: %v", err)
			}
			if time.Since(start) > s.cfg.ttl+s.cfg.slack {
				t.Fatalf("%q still held %v after a grant of ttl %v", key, time.Since(start), s.cfg.ttl)
			}
			time.Sleep(5 * time.Millisecond) // polling with a bound
		}
	}
	errs := lock.ReleaseEach(ctxFor(t, s.cfg.waitBound), l, []lock.Handle{ha, hb, hc})
	if !errors.Is(errs[0], lock.ErrLost) || errs[1] != nil || !errors.Is(errs[2], lock.ErrLost) {
		t.Fatalf("ReleaseEach of expired, held, expired: %v, want ErrLost, nil, ErrLost", errs)
	}
	for i, h := range next {
		if err := h.Extend(ctxFor(t, s.cfg.waitBound), s.cfg.longTTL); err != nil {
			t.Fatalf("successor %d's Extend after the expired handle's ReleaseEach: %v", i, err)
		}
		_ = h.Release(context.Background())
	}
}

// releaseEachRefused checks an EachReleaser's own ReleaseEach: a handle it
// cannot release natively (a wrapper it does not know) is refused with
// ErrInvalidArgument and stays held.
func (s *suite) releaseEachRefused(t *testing.T) {
	l := s.newLock(t)
	er, ok := l.(lock.EachReleaser)
	if !ok {
		t.Skipf("%T does not implement lock.EachReleaser", l)
	}
	key := s.key(t, "k")
	h := s.mustAcquire(t, l, key, s.cfg.longTTL)
	errs := er.ReleaseEach(ctxFor(t, s.cfg.waitBound), []lock.Handle{foreign{h}})
	if !errors.Is(errs[0], lock.ErrInvalidArgument) {
		t.Fatalf("ReleaseEach of an unknown wrapper: %v, want ErrInvalidArgument", errs[0])
	}
	expectNotAcquired(t, s.newLock(t), key, s.cfg.longTTL, "a refused ReleaseEach")
	if err := h.Release(ctxFor(t, s.cfg.waitBound)); err != nil {
		t.Fatalf("Release after a refused ReleaseEach: %v", err)
	}
}

// releaseEachWakesQueued: a waiter queued in the server (lock.Acquire on
// a lock.Queue) has the key within releaseWakeBound of a ReleaseEach.
func (s *suite) releaseEachWakesQueued(t *testing.T) {
	l, w := s.newLock(t), s.newLock(t)
	q, ok := w.(lock.Queue)
	if !ok {
		t.Skipf("%T does not implement lock.Queue", w)
	}
	hs, key := s.releaseEachHeld(t, l)
	got := make(chan error, 1)
	waitAndRelease(t, got, func() (lock.Handle, error) {
		return lock.Acquire(ctxFor(t, s.cfg.waitBound), w, key, s.cfg.longTTL)
	})
	WaitQueued(t, q, key, 1, s.cfg.waitBound)
	s.releaseEachWakes(t, l, hs, got)
}

// releaseEachWakesSubscribed: a waiter subscribed to releases (lock.Acquire
// on a lock.Waiter, no queue, backoff of a minute) has the key within
// releaseWakeBound of a ReleaseEach.
func (s *suite) releaseEachWakesSubscribed(t *testing.T) {
	l, w := s.newLock(t), s.newLock(t)
	wt, ok := w.(lock.Waiter)
	if !ok {
		t.Skipf("%T does not implement lock.Waiter", w)
	}
	hs, key := s.releaseEachHeld(t, l)
	ob := &observed{Lock: w, Waiter: wt, failed: make(chan struct{})}
	got := make(chan error, 1)
	waitAndRelease(t, got, func() (lock.Handle, error) {
		return lock.Acquire(ctxFor(t, s.cfg.waitBound), ob, key, s.cfg.longTTL, lock.WithBackoff(time.Minute, time.Minute))
	})
	select {
	case <-ob.failed: // past its failed attempt: now it waits
	case err := <-got:
		t.Fatalf("Acquire returned while the key was held: %v", err)
	}
	s.releaseEachWakes(t, l, hs, got)
}

// releaseEachHeld takes a few keys on l; the waiters wait for the middle
// one.
func (s *suite) releaseEachHeld(t *testing.T, l lock.Lock) ([]lock.Handle, string) {
	hs := make([]lock.Handle, 5)
	for i := range hs {
		hs[i] = s.mustAcquire(t, l, s.key(t, fmt.Sprintf("k%d", i)), s.cfg.longTTL)
	}
	return hs, hs[2].Key()
}

// waitAndRelease starts a waiter that runs acquire, sends its outcome on
// got, and then releases what it got: the wake-up releaseEachWakes times
// is the grant's, not the waiter's release after it. The test's cleanup
// waits for that release.
func waitAndRelease(t *testing.T, got chan<- error, acquire func() (lock.Handle, error)) {
	released := make(chan struct{})
	t.Cleanup(func() { <-released })
	go func() {
		defer close(released)
		h, err := acquire()
		got <- err
		if err == nil {
			_ = h.Release(context.Background())
		}
	}()
}

func (s *suite) releaseEachWakes(t *testing.T, l lock.Lock, hs []lock.Handle, got chan error) {
	t.Helper()
	start := time.Now()
	for i, err := range lock.ReleaseEach(ctxFor(t, s.cfg.waitBound), l, hs) {
		if err != nil {
			t.Fatalf("ReleaseEach: handle %d: %v", i, err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Acquire after the ReleaseEach: %v", err)
		}
		t.Logf("the waiter had the key %v after the ReleaseEach began", time.Since(start).Round(time.Millisecond))
	case <-time.After(releaseWakeBound):
		t.Fatalf("the waiter did not have the key within %v of the ReleaseEach (holder's ttl %v)", releaseWakeBound, s.cfg.longTTL)
	}
}
