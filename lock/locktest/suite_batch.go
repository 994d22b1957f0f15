package locktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// batchGrants is how many grants the batch checks hold at once: more than
// one chunk of every built-in backend (1,000 keys per Redis script, 2,000
// grants per etcd lease).
const batchGrants = 2500

// forceReleaser is what RunBatch needs to take one grant away from its
// holder, as an operator would (every built-in backend has it).
type forceReleaser interface {
	ForceRelease(ctx context.Context, key string) (bool, error)
}

// RunBatch checks a lock.Batcher's batches, and a lock.Keeper over them,
// as subtests of t: many grants renewed in one Renew; one grant taken away
// (ForceRelease) is reported lost alone while the others are renewed; a
// released grant is lost to Renew and free for others; a handle the batch
// cannot renew is refused; a Keeper keeps many leases, reports one loss
// alone and frees everything on Close. The backend must implement
// lock.Batcher and ForceRelease(ctx, key) (bool, error). With
// WithSessionLoss, a forced release may end the other grants that share
// the key's server session (PostgreSQL), but never all of a batch spread
// over several sessions.
//
// Run(t, Batched(f)) is the conformance suite on batch grants; RunBatch is
// what only batches do.
func RunBatch(t *testing.T, newLock Factory, opts ...Option) {
	c := defaults()
	for _, o := range opts {
		o(&c)
	}
	s := &suite{cfg: c, newLock: newLock, prefix: "locktest/" + randomID() + "/"}
	t.Run("RenewMany", s.batchRenewMany)
	t.Run("OneLostAlone", s.batchOneLost)
	t.Run("ReleaseAlone", s.batchRelease)
	t.Run("ForeignHandle", s.batchForeign)
	t.Run("Keeper", s.batchKeeper)
}

// WithSessionLoss says that the backend's ForceRelease ends a server
// session, and with it every grant of a batch on that session (RunBatch).
func WithSessionLoss() Option { return func(c *config) { c.sessionLoss = true } }

func (s *suite) batcher(t *testing.T) (lock.Lock, lock.Batcher, forceReleaser) {
	l := s.newLock(t)
	bl, ok := l.(lock.Batcher)
	if !ok {
		t.Fatalf("%T is not a lock.Batcher", l)
	}
	fr, ok := l.(forceReleaser)
	if !ok {
		t.Fatalf("%T has no ForceRelease", l)
	}
	return l, bl, fr
}

// openBatch makes a Batch of ttl, closed when the test ends, and n grants
// through it.
func (s *suite) openBatch(t *testing.T, bl lock.Batcher, ttl time.Duration, n int) (lock.Batch, []lock.Handle) {
	t.Helper()
	b, err := bl.NewBatch(ctxFor(t, s.cfg.waitBound), ttl)
	if err != nil {
		t.Fatalf("NewBatch(%v): %v", ttl, err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	hs := make([]lock.Handle, n)
	ctx := ctxFor(t, 10*s.cfg.waitBound)
	for i := range hs {
		h, err := b.TryAcquire(ctx, s.key(t, fmt.Sprintf("k%d", i)))
		if err != nil {
			t.Fatalf("batch TryAcquire %d: %v", i, err)
		}
		hs[i] = h
	}
	return b, hs
}

func (s *suite) batchRenewMany(t *testing.T) {
	_, bl, _ := s.batcher(t)
	ttl := s.cfg.longTTL
	b, hs := s.openBatch(t, bl, ttl, batchGrants)
	before := time.Now()
	errs := b.Renew(ctxFor(t, s.cfg.waitBound), hs)
	after := time.Now()
	if len(errs) != len(hs) {
		t.Fatalf("Renew of %d handles returned %d outcomes", len(hs), len(errs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Renew: handle %d (%s): %v", i, hs[i].Key(), err)
		}
		checkValidity(t, fmt.Sprintf("handle %d after Renew", i), hs[i].ValidUntil(), before, after, ttl)
		if i > 0 && hs[i].Token() == hs[i-1].Token() && hs[i].Key() == hs[i-1].Key() {
			t.Fatalf("two handles of one key")
		}
	}
	other := s.newLock(t)
	for _, i := range []int{0, len(hs) / 2, len(hs) - 1} {
		expectNotAcquired(t, other, hs[i].Key(), ttl, "a renewed batch grant")
	}
	// Each handle's own Extend and Release act on it alone.
	if err := hs[1].Extend(ctxFor(t, s.cfg.waitBound), ttl); err != nil {
		t.Fatalf("Extend of a batch handle: %v", err)
	}
	if err := hs[1].Release(ctxFor(t, s.cfg.waitBound)); err != nil {
		t.Fatalf("Release of a batch handle: %v", err)
	}
	expectNotAcquired(t, other, hs[0].Key(), ttl, "a batch grant beside a released one")
	if err := b.Close(ctxFor(t, s.cfg.waitBound)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := b.TryAcquire(ctxFor(t, s.cfg.waitBound), s.key(t, "after-close")); err == nil {
		t.Fatal("TryAcquire on a closed batch succeeded")
	}
	if err := b.Close(ctxFor(t, s.cfg.waitBound)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func (s *suite) batchOneLost(t *testing.T) {
	_, bl, fr := s.batcher(t)
	b, hs := s.openBatch(t, bl, s.cfg.longTTL, batchGrants)
	victim := len(hs) / 3
	if ok, err := fr.ForceRelease(ctxFor(t, s.cfg.waitBound), hs[victim].Key()); !ok || err != nil {
		t.Fatalf("ForceRelease(%s): %v, %v", hs[victim].Key(), ok, err)
	}
	errs := b.Renew(ctxFor(t, s.cfg.waitBound), hs)
	if !errors.Is(errs[victim], lock.ErrLost) {
		t.Fatalf("Renew of the force-released grant: %v, want ErrLost", errs[victim])
	}
	lostN := 0
	for i, err := range errs {
		switch {
		case i == victim:
		case err == nil:
		case errors.Is(err, lock.ErrLost) && s.cfg.sessionLoss:
			lostN++
		default:
			t.Fatalf("Renew: handle %d beside the force-released one: %v", i, err)
		}
	}
	if lostN == len(hs)-1 {
		t.Fatalf("one forced release ended all %d grants of the batch", len(hs))
	}
	// The survivors are still held, and renew again.
	errs = b.Renew(ctxFor(t, s.cfg.waitBound), hs)
	for i, err := range errs {
		if err != nil && !errors.Is(err, lock.ErrLost) {
			t.Fatalf("second Renew: handle %d: %v", i, err)
		}
	}
	h, err := s.newLock(t).TryAcquire(ctxFor(t, s.cfg.waitBound), hs[victim].Key(), s.cfg.longTTL)
	if err != nil {
		t.Fatalf("the force-released key is not free: %v", err)
	}
	_ = h.Release(context.Background())
}

func (s *suite) batchRelease(t *testing.T) {
	_, bl, _ := s.batcher(t)
	b, hs := s.openBatch(t, bl, s.cfg.longTTL, 10)
	if err := hs[4].Release(ctxFor(t, s.cfg.waitBound)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	errs := b.Renew(ctxFor(t, s.cfg.waitBound), hs)
	for i, err := range errs {
		if (i == 4) != errors.Is(err, lock.ErrLost) || (i != 4 && err != nil) {
			t.Fatalf("Renew after handle 4's Release: handle %d: %v", i, err)
		}
	}
	other := s.newLock(t)
	h, err := other.TryAcquire(ctxFor(t, s.cfg.waitBound), hs[4].Key(), s.cfg.longTTL)
	if err != nil {
		t.Fatalf("a released batch key is not free: %v", err)
	}
	// The new holder's grant is not touched by the old handle's renewal.
	if errs := b.Renew(ctxFor(t, s.cfg.waitBound), hs[4:5]); !errors.Is(errs[0], lock.ErrLost) {
		t.Fatalf("Renew of a released handle whose key has a new holder: %v, want ErrLost", errs[0])
	}
	if err := h.Extend(ctxFor(t, s.cfg.waitBound), s.cfg.longTTL); err != nil {
		t.Fatalf("the new holder's Extend after the old handle's Renew: %v", err)
	}
	_ = h.Release(context.Background())
}

// foreign is a handle no batch made.
type foreign struct{ lock.Handle }

func (s *suite) batchForeign(t *testing.T) {
	_, bl, _ := s.batcher(t)
	b, hs := s.openBatch(t, bl, s.cfg.longTTL, 2)
	errs := b.Renew(ctxFor(t, s.cfg.waitBound), []lock.Handle{hs[0], foreign{hs[1]}})
	if errs[0] != nil {
		t.Fatalf("Renew: %v", errs[0])
	}
	if !errors.Is(errs[1], lock.ErrInvalidArgument) {
		t.Fatalf("Renew of a handle the batch did not make: %v, want ErrInvalidArgument", errs[1])
	}
	if errs := b.Renew(ctxFor(t, s.cfg.waitBound), nil); len(errs) != 0 {
		t.Fatalf("Renew of no handles: %v", errs)
	}
}

func (s *suite) batchKeeper(t *testing.T) {
	l, _, fr := s.batcher(t)
	ttl := max(s.cfg.minTTL, 2*time.Second)
	k, err := lock.NewKeeper(l, ttl)
	if err != nil {
		t.Fatalf("NewKeeper: %v", err)
	}
	defer k.Close(context.Background())
	leases := make([]*lock.Lease, 200)
	ctx := ctxFor(t, 10*s.cfg.waitBound)
	for i := range leases {
		if leases[i], err = k.TryAcquire(ctx, s.key(t, fmt.Sprintf("k%d", i))); err != nil {
			t.Fatalf("Keeper.TryAcquire %d: %v", i, err)
		}
	}
	// Past two ttls every lease is still held.
	time.Sleep(2*ttl + ttl/2)
	other := s.newLock(t)
	for i, le := range leases {
		if le.Err() != nil {
			t.Fatalf("lease %d lost while renewals succeed: %v", i, le.Err())
		}
	}
	expectNotAcquired(t, other, leases[0].Handle().Key(), ttl, "a kept lease past two ttls")
	victim := leases[77]
	if ok, err := fr.ForceRelease(ctxFor(t, s.cfg.waitBound), victim.Handle().Key()); !ok || err != nil {
		t.Fatalf("ForceRelease: %v, %v", ok, err)
	}
	select {
	case <-victim.Context().Done():
	case <-time.After(ttl + s.cfg.slack):
		t.Fatalf("the force-released lease's context is not done within ttl + slack")
	}
	if !errors.Is(victim.Err(), lock.ErrLost) {
		t.Fatalf("force-released lease: %v, want ErrLost", victim.Err())
	}
	alive := 0
	for _, le := range leases {
		if le.Err() == nil {
			alive++
		}
	}
	if alive == 0 || (!s.cfg.sessionLoss && alive != len(leases)-1) {
		t.Fatalf("%d of %d leases alive after one forced release", alive, len(leases))
	}
	if err := k.Close(ctxFor(t, s.cfg.waitBound)); err != nil {
		t.Fatalf("Keeper.Close: %v", err)
	}
	for _, i := range []int{0, 100, 199} {
		h, err := other.TryAcquire(ctxFor(t, s.cfg.waitBound), leases[i].Handle().Key(), ttl)
		if err != nil {
			t.Fatalf("key %d not free after the Keeper's Close: %v", i, err)
		}
		_ = h.Release(context.Background())
	}
}
