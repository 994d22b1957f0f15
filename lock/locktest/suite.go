package locktest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// Factory returns a new instance of the backend under test; see the package
// documentation.
type Factory func(t testing.TB) lock.Lock

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newLock Factory, opts ...Option) {
	c := defaults()
	for _, o := range opts {
		o(&c)
	}
	if c.minTTL > c.ttl {
		c.ttl = c.minTTL
	}
	s := &suite{cfg: c, newLock: newLock, prefix: "locktest/" + randomID() + "/"}

	// The leak checks count goroutines, so they run first and alone: the
	// parallel subtests below start only once these have finished.
	t.Run("CancelStorm", s.cancelStorm)
	// The renewal checks keep leases of the short ttl alive by renewals
	// every ttl/3, and fail when one is late: they run alone too, not
	// beside the suite's own load (Contention, and the shared and all-of
	// checks that contend), which on 2 cores delayed a PostgreSQL renewal
	// past a 300 ms ttl (CI, TestConformance/KeepRenews).
	t.Run("KeepRenews", s.keepRenews)
	t.Run("KeepLosesAtDeadline", s.keepDeadline)
	t.Run("KeepLosesOnRenewal", s.keepRenewalLoss)
	t.Run("SharedKeep", func(t *testing.T) {
		skipUnless[lock.SharedLock](t, s)
		s.sharedKeep(t)
	})

	parallel(t, []subtest{
		{"Basics", s.basics},
		{"BadInput", s.badInput},
		{"Validity", s.validity},
		{"Contention", s.contention},
		{"ExpiryAndOwnership", s.expiry},
		{"ReleaseTwice", s.releaseTwice},
		{"ExtendNeverReacquires", s.extendNeverReacquires},
		{"Waiter", s.waiter},
		{"Queue", s.queue},
		{"Claim", s.claim},
		{"MultiLock", s.multiLock},
		{"MaxTTL", s.maxTTL},
		{"MaxKeys", s.maxKeys},
		{"Inspector", s.inspector},
		{"Shared", s.shared},
		{"Group", s.group},
	})
}

type subtest struct {
	name string
	fn   func(*testing.T)
}

// shared runs the checks of lock.SharedLock as subtests of t.
func (s *suite) shared(t *testing.T) {
	skipUnless[lock.SharedLock](t, s)
	parallel(t, []subtest{
		{"Basics", s.sharedBasics},
		{"Intent", s.sharedIntent},
		{"Exclusion", s.sharedExclusion},
		{"WriterNotStarved", s.sharedWriterNotStarved},
		{"Abandoned", s.sharedAbandoned},
		{"ExtendRelease", s.sharedExtendRelease},
		{"Tokens", s.sharedTokens},
		{"Waiter", s.sharedWaiter},
		{"Inspector", s.sharedInspector},
	})
}

// group runs the checks of lock.GroupLock as subtests of t.
func (s *suite) group(t *testing.T) {
	skipUnless[lock.GroupLock](t, s)
	parallel(t, []subtest{
		{"NoPartial", s.groupNoPartial}, {"Contention", s.groupContention},
		{"Conflict", s.groupConflict}, {"Tokens", s.groupTokens},
		{"ExtendRelease", s.groupExtendRelease}, {"Expiry", s.groupExpiry},
		{"OverlappingWaiters", s.groupOverlappingWaiters}, {"BadInput", s.groupBadInput},
		{"Inspector", s.groupInspector},
	})
}

// skipUnless skips t unless the backend implements T.
func skipUnless[T any](t *testing.T, s *suite) {
	t.Helper()
	if probe := s.newLock(t); !implements[T](probe) {
		t.Skipf("%T does not implement %s", probe, strings.TrimPrefix(fmt.Sprintf("%T", (*T)(nil)), "*"))
	}
}

func implements[T any](l lock.Lock) bool { _, ok := l.(T); return ok }

// parallel runs tests as parallel subtests of t.
func parallel(t *testing.T, tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	cfg     config
	newLock Factory
	prefix  string
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// key returns a key unique to this test (and call).
func (s *suite) key(t testing.TB, suffix string) string {
	return s.prefix + strings.ReplaceAll(t.Name(), "/", ".") + "/" + suffix
}

// ctx returns a context bounded so that a hung backend fails the test
// instead of the whole run.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) mustAcquire(t testing.TB, l lock.Lock, key string, ttl time.Duration) lock.Handle {
	t.Helper()
	h, err := l.TryAcquire(ctxFor(t, s.cfg.waitBound), key, ttl)
	if err != nil {
		t.Fatalf("TryAcquire(%q, %v): %v", key, ttl, err)
	}
	if h == nil {
		t.Fatalf("TryAcquire(%q) returned a nil handle and no error", key)
	}
	return h
}

func expectNotAcquired(t testing.TB, l lock.Lock, key string, ttl time.Duration, why string) {
	t.Helper()
	h, err := l.TryAcquire(ctxFor(t, 10*time.Second), key, ttl)
	if err == nil {
		_ = h.Release(context.Background())
		t.Fatalf("%s: TryAcquire(%q) succeeded (token %d) while another grant must be live", why, key, h.Token())
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquire(%q): want ErrNotAcquired, got %v", why, key, err)
	}
}

func expectLost(t testing.TB, err error, what string) {
	t.Helper()
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("%s: want ErrLost, got %v", what, err)
	}
}

// acquireWithin blocks in lock.Acquire for at most d.
func acquireWithin(t testing.TB, l lock.Lock, key string, ttl, d time.Duration, what string) lock.Handle {
	t.Helper()
	start := time.Now()
	h, err := lock.Acquire(ctxFor(t, d), l, key, ttl)
	if err != nil {
		t.Fatalf("%s: Acquire(%q) did not succeed within %v (waited %v): %v", what, key, d, time.Since(start).Round(time.Millisecond), err)
	}
	return h
}

func (s *suite) basics(t *testing.T) {
	a, b := s.newLock(t), s.newLock(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	h := s.mustAcquire(t, a, key, ttl)
	if h.Key() != key {
		t.Fatalf("Key() = %q, want %q", h.Key(), key)
	}
	if h.Token() == 0 {
		t.Fatalf("Token() = 0; tokens start above zero so that a zero token means none")
	}
	expectNotAcquired(t, b, key, ttl, "another instance")
	expectNotAcquired(t, a, key, ttl, "the same instance (locks are not reentrant)")
	_, err := b.TryAcquire(ctxFor(t, 10*time.Second), key, ttl)
	if r := lock.RemainingTTL(err); r < 0 || r > ttl {
		t.Fatalf("RemainingTTL = %v, want within (0, %v]", r, ttl)
	}
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	h2 := s.mustAcquire(t, b, key, ttl)
	defer h2.Release(context.Background())
	if h2.Token() <= h.Token() {
		t.Fatalf("token after re-acquire %d, want > %d", h2.Token(), h.Token())
	}
	// Independent keys do not interfere.
	h3 := s.mustAcquire(t, a, s.key(t, "other"), ttl)
	if err := h3.Release(context.Background()); err != nil {
		t.Fatalf("Release of an independent key: %v", err)
	}
}

func (s *suite) validity(t *testing.T) {
	l := s.newLock(t)
	key := s.key(t, "k")
	ttl := s.cfg.longTTL
	before := time.Now()
	h := s.mustAcquire(t, l, key, ttl)
	after := time.Now()
	defer h.Release(context.Background())
	checkValidity(t, "after TryAcquire", h.ValidUntil(), before, after, ttl)

	before = time.Now()
	if err := h.Extend(ctxFor(t, 10*time.Second), ttl); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	after = time.Now()
	checkValidity(t, "after Extend", h.ValidUntil(), before, after, ttl)

	// A shorter ttl on Extend is honoured too.
	short := max(s.cfg.ttl, ttl/10)
	before = time.Now()
	if err := h.Extend(ctxFor(t, 10*time.Second), short); err != nil {
		t.Fatalf("Extend(%v): %v", short, err)
	}
	checkValidity(t, "after a shorter Extend", h.ValidUntil(), before, time.Now(), short)
}

// checkValidity: ValidUntil must not be later than the call's return plus
// ttl, and should not be absurdly early either. (That it is conservative
// enough is checked where it matters: ExpiryAndOwnership makes sure no
// successor is granted before it.)
func checkValidity(t testing.TB, what string, vu, before, after time.Time, ttl time.Duration) {
	t.Helper()
	if vu.After(after.Add(ttl)) {
		t.Fatalf("%s: ValidUntil is %v past the reply time + ttl (sent at -%v): it must count from the send time", what, vu.Sub(after.Add(ttl)), after.Sub(before))
	}
	if vu.Before(after.Add(ttl / 2)) {
		t.Fatalf("%s: ValidUntil leaves less than half the ttl (%v of %v)", what, vu.Sub(after), ttl)
	}
}

// holdYields is how often a contention holder yields before its fenced write.
const holdYields = 3

// contention: 32 goroutines over 4 instances take one key many times. Each
// holder writes to a fenced resource at the end of its hold: with a single
// grant at a time every write is admitted; two overlapping grants show up as
// a rejected stale write when the newer one writes first.
func (s *suite) contention(t *testing.T) {
	const instances, perInstance = 4, 8
	key := s.key(t, "k")
	var (
		holders    atomic.Int32
		overlap    atomic.Int32
		fence      lock.Fence
		mu         sync.Mutex
		lastToken  uint64
		order      []string
		grants     int
		stale      atomic.Int32
		firstStale string
		wg         sync.WaitGroup
		errs       = make(chan error, instances*perInstance)
	)
	ctx := ctxFor(t, 2*time.Minute)
	for i := range instances {
		l := s.newLock(t)
		for g := range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range s.cfg.rounds {
					h, err := lock.Acquire(ctx, l, key, s.cfg.longTTL)
					if err != nil {
						errs <- fmt.Errorf("instance %d goroutine %d round %d: Acquire: %w", i, g, r, err)
						return
					}
					if n := holders.Add(1); n != 1 {
						overlap.Add(1)
					}
					mu.Lock()
					if h.Token() <= lastToken {
						order = append(order, fmt.Sprintf("token %d granted after %d", h.Token(), lastToken))
					}
					lastToken = max(lastToken, h.Token())
					grants++
					mu.Unlock()
					// The protected work: yield, then write to the fenced
					// resource at the end of the hold, as a real holder
					// does. A second grant that overlapped this one and
					// wrote first under its newer token makes this write
					// stale.
					for range holdYields {
						runtime.Gosched()
					}
					if err := fence.Do(h.Token(), nil); err != nil {
						stale.Add(1)
						mu.Lock()
						firstStale = cmp.Or(firstStale, err.Error())
						mu.Unlock()
					}
					holders.Add(-1)
					if err := h.Release(ctx); err != nil {
						errs <- fmt.Errorf("instance %d goroutine %d round %d: Release: %w", i, g, r, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlap.Load(); n > 0 {
		t.Errorf("grant safety violated: %d times a second goroutine held the key at once", n)
	}
	if len(order) > 0 {
		t.Errorf("fencing violated %d times, first: %s", len(order), order[0])
	}
	if n := stale.Load(); n > 0 {
		t.Errorf("fenced resource rejected %d stale writes: a newer grant wrote while an older one was still held; first: %s", n, firstStale)
	}
	if want := instances * perInstance * s.cfg.rounds; grants != want && !t.Failed() {
		t.Errorf("%d grants, want %d", grants, want)
	}
}

// expiry: an abandoned grant frees within ttl + slack, its successor gets a
// larger token and is not granted before the old ValidUntil; the old
// handle's Extend and Release return ErrLost and leave the successor alone.
func (s *suite) expiry(t *testing.T) {
	a, b, c := s.newLock(t), s.newLock(t), s.newLock(t)
	key := s.key(t, "k")
	ha := s.mustAcquire(t, a, key, s.cfg.ttl)
	hb := s.takeOver(t, "grant", ha, ha.Token(), b, c, key)
	if err := hb.Extend(ctxFor(t, 10*time.Second), s.cfg.longTTL); err != nil {
		t.Fatalf("successor's Extend after the old holder's Release: %v", err)
	}
	if err := hb.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("successor's Release: %v", err)
	}
}

// abandoned is a grant left to expire: a Handle or a Group.
type abandoned interface {
	ValidUntil() time.Time
	Extend(ctx context.Context, ttl time.Duration) error
	Release(ctx context.Context) error
}

// takeOver checks the successor of an abandoned grant of key (old, of
// token): b's Acquire gets key within ttl + slack, not before old's
// ValidUntil, with a larger token; old's Extend and Release then return
// ErrLost and leave the successor alone (c is still refused). It returns
// the successor's grant.
func (s *suite) takeOver(t testing.TB, what string, old abandoned, token uint64, b, c lock.Lock, key string) lock.Handle {
	t.Helper()
	hb := acquireWithin(t, b, key, s.cfg.longTTL, s.cfg.ttl+s.cfg.slack, "an abandoned "+what+" must free within ttl + slack")
	if now := time.Now(); now.Before(old.ValidUntil()) {
		t.Fatalf("a successor exists %v before the abandoned %s's ValidUntil", old.ValidUntil().Sub(now), what)
	}
	if hb.Token() <= token {
		t.Fatalf("successor token %d, want > the abandoned %s's %d", hb.Token(), what, token)
	}
	expectLost(t, old.Extend(ctxFor(t, 10*time.Second), s.cfg.ttl), "Extend of an expired, taken-over "+what)
	expectLost(t, old.Release(ctxFor(t, 10*time.Second)), "Release of an expired, taken-over "+what)
	expectNotAcquired(t, c, key, s.cfg.ttl, "the successor must still hold the key after the old "+what+"'s Extend and Release")
	return hb
}

func (s *suite) releaseTwice(t *testing.T) {
	a, b := s.newLock(t), s.newLock(t)
	key := s.key(t, "k")
	h := s.mustAcquire(t, a, key, s.cfg.longTTL)
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	expectLost(t, h.Release(ctxFor(t, 10*time.Second)), "second Release")
	expectLost(t, h.Extend(ctxFor(t, 10*time.Second), s.cfg.longTTL), "Extend after Release")
	h2 := s.mustAcquire(t, b, key, s.cfg.longTTL) // Extend did not re-acquire
	expectLost(t, h.Release(ctxFor(t, 10*time.Second)), "third Release, with a new holder")
	if err := h2.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("the new holder's Release after the old handle's: %v", err)
	}
}

func (s *suite) extendNeverReacquires(t *testing.T) {
	a, b, c := s.newLock(t), s.newLock(t), s.newLock(t)
	key := s.key(t, "k")
	h := s.mustAcquire(t, a, key, s.cfg.ttl)
	// Let the grant expire: b's blocking Acquire returns once it has.
	hb := acquireWithin(t, b, key, s.cfg.longTTL, s.cfg.ttl+s.cfg.slack, "expiry")
	if err := hb.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// The key is free now; the expired handle must not take it back.
	expectLost(t, h.Extend(ctxFor(t, 10*time.Second), s.cfg.longTTL), "Extend of an expired grant on a free key")
	hc := s.mustAcquire(t, c, key, s.cfg.longTTL)
	defer hc.Release(context.Background())
}

func (s *suite) keepRenews(t *testing.T) {
	a, b := s.newLock(t), s.newLock(t)
	key := s.key(t, "k")
	ttl := s.cfg.ttl
	h := s.mustAcquire(t, a, key, ttl)
	lease, err := lock.Keep(context.Background(), h, ttl)
	if err != nil {
		t.Fatalf("Keep: %v", err)
	}
	if tok, ok := lock.TokenFrom(lease.Context()); !ok || tok != h.Token() {
		t.Fatalf("TokenFrom(lease context) = %d, %v; want %d", tok, ok, h.Token())
	}
	first := lease.ValidUntil()
	// Three ttls later the grant must still be ours.
	select {
	case <-lease.Context().Done():
		t.Fatalf("lease lost while renewing: %v", context.Cause(lease.Context()))
	case <-time.After(3 * ttl):
	}
	if hb, err := b.TryAcquire(ctxFor(t, 10*time.Second), key, ttl); err == nil {
		granted := time.Now()
		_ = hb.Release(context.Background())
		if vu := lease.ValidUntil(); granted.Before(vu) {
			t.Fatalf("a kept lease: TryAcquire(%q) succeeded (token %d) %v before the lease's ValidUntil", key, hb.Token(), vu.Sub(granted))
		}
		if lease.Context().Err() != nil {
			// Not a double grant: Keep reported the loss. Its renewals
			// did not keep up (a loaded machine), which still fails.
			t.Fatalf("lease lost while renewing every %v: %v", ttl/3, context.Cause(lease.Context()))
		}
		t.Fatalf("a kept lease: TryAcquire(%q) succeeded (token %d) while the lease still reports the grant held", key, hb.Token())
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a kept lease: TryAcquire(%q): want ErrNotAcquired, got %v", key, err)
	}
	if !lease.ValidUntil().After(first) {
		t.Fatalf("ValidUntil did not advance: %v then %v", first, lease.ValidUntil())
	}
	if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("lease Release: %v", err)
	}
	if lease.Context().Err() == nil {
		t.Fatalf("lease context not done after Release")
	}
	if lease.Err() != nil {
		t.Fatalf("lease.Err() after a clean Release = %v, want nil", lease.Err())
	}
	hb := s.mustAcquire(t, b, key, ttl) // released at once, not left to expire
	defer hb.Release(context.Background())
	expectLost(t, lease.Release(ctxFor(t, 10*time.Second)), "second lease Release")
}

func (s *suite) keepDeadline(t *testing.T) {
	a := s.newLock(t)
	key := s.key(t, "k")
	ttl := s.cfg.ttl
	h := s.mustAcquire(t, a, key, ttl)
	// Renewals of ten ttls, the first after nine: the grant's ValidUntil
	// (of the acquire's ttl) passes first.
	lease, err := lock.Keep(context.Background(), h, 10*ttl, lock.WithRenewInterval(9*ttl))
	if err != nil {
		t.Fatalf("Keep: %v", err)
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(ttl + s.cfg.slack):
		t.Fatalf("lease context not cancelled within ttl + slack after ValidUntil passed")
	}
	if now := time.Now(); now.Before(h.ValidUntil()) {
		t.Fatalf("lease cancelled %v before ValidUntil", h.ValidUntil().Sub(now))
	}
	if cause := context.Cause(lease.Context()); !errors.Is(cause, lock.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", cause)
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("lease.Err() = %v, want ErrLost", lease.Err())
	}
	_ = lease.Release(ctxFor(t, 10*time.Second)) // ErrLost or nil, depending on the server's expiry
}

// farFuture hides a handle's real ValidUntil so that Keep learns of the loss
// from Extend, not from its deadline.
type farFuture struct{ lock.Handle }

func (farFuture) ValidUntil() time.Time { return time.Now().Add(time.Hour) }

func (s *suite) keepRenewalLoss(t *testing.T) {
	a, b := s.newLock(t), s.newLock(t)
	key := s.key(t, "k")
	h := s.mustAcquire(t, a, key, s.cfg.ttl)
	hb := acquireWithin(t, b, key, s.cfg.longTTL, s.cfg.ttl+s.cfg.slack, "expiry")
	defer hb.Release(context.Background())
	lease, err := lock.Keep(context.Background(), farFuture{h}, s.cfg.ttl, lock.WithRenewInterval(time.Millisecond))
	if err != nil {
		t.Fatalf("Keep: %v", err)
	}
	select {
	case <-lease.Context().Done():
	case <-time.After(s.cfg.waitBound):
		t.Fatalf("Keep of a taken-over grant not cancelled within %v", s.cfg.waitBound)
	}
	if cause := context.Cause(lease.Context()); !errors.Is(cause, lock.ErrLost) {
		t.Fatalf("cause = %v, want ErrLost", cause)
	}
	expectLost(t, lease.Release(ctxFor(t, 10*time.Second)), "Release of a lost lease")
	if err := hb.Extend(ctxFor(t, 10*time.Second), s.cfg.longTTL); err != nil {
		t.Fatalf("successor's Extend after the lost lease's renewals and Release: %v", err)
	}
}
