package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// runID makes the keys of each run new (-count 2).
func runID(t testing.TB) string {
	return t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "/"
}

// fill makes n grants through b, of keys prefix+i.
func fill(t testing.TB, ctx context.Context, b lock.Batch, prefix string, n int) []lock.Handle {
	t.Helper()
	hs := make([]lock.Handle, n)
	for i := range hs {
		h, err := b.TryAcquire(ctx, prefix+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		hs[i] = h
	}
	return hs
}

func newBatch(t testing.TB, l *etcdlock.Lock, ttl time.Duration) lock.Batch {
	t.Helper()
	b, err := l.NewBatch(t.Context(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// One Renew of 3,000 grants costs, per lease of 2,000 grants, one
// keepalive (all of them on one stream, sent before any answer is read)
// and one LeaseTimeToLive: 1 stream and 2 reads here, within
// ceil(3000/1000) = 3 round trips, where renewing each grant on its own
// costs 3,000. It moves every handle's ValidUntil on.
func TestBatchRenewRoundTrips(t *testing.T) {
	l, rc := countingLock(t, testenv.Etcd(t).Endpoints())
	ctx := ctxFor(t, 2*time.Minute)
	b := newBatch(t, l, 30*time.Second)
	const n = 3000
	hs := fill(t, ctx, b, "batch/"+runID(t), n)
	before := rc.counts()
	sent := time.Now()
	errs := b.Renew(context.WithValue(ctx, callerKey{}, true), hs)
	took := time.Since(sent)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Renew: grant %d: %v", i, err)
		}
		if vu := hs[i].ValidUntil(); vu.Before(sent.Add(29 * time.Second)) {
			t.Fatalf("grant %d: ValidUntil %v after Renew, want about 30 s from it", i, vu.Sub(sent))
		}
	}
	got := rc.counts()
	for k, v := range before {
		got[k] -= v
		if got[k] == 0 {
			delete(got, k)
		}
	}
	leases := (n + etcdlock.BatchLeaseGrants - 1) / etcdlock.BatchLeaseGrants
	t.Logf("Renew of %d grants in %v: %v", n, took, got)
	want := map[string]int{
		"/etcdserverpb.Lease/LeaseKeepAlive stream": 1,
		"/etcdserverpb.Lease/LeaseKeepAlive":        leases,
		"/etcdserverpb.Lease/LeaseTimeToLive":       leases,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Renew of %d grants made %v; want %v", n, got, want)
	}
}

// A grant deleted by ForceRelease while its (shared) lease lives is
// reported lost alone: Renew returns ErrLost for it and nil for the
// others, its Release returns ErrLost, and the key is free for another
// holder at once. Before, ForceRelease revoked the grant's lease, which
// ended every grant of the batch.
func TestBatchForceReleasedGrantLostAlone(t *testing.T) {
	srv := testenv.Etcd(t)
	l, operator := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	b := newBatch(t, l, 20*time.Second)
	p := "batch/" + runID(t)
	hs := fill(t, ctx, b, p, 50)
	victim := hs[17]
	if ok, err := operator.ForceRelease(ctx, victim.Key()); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	errs := b.Renew(ctx, hs)
	for i, err := range errs {
		if i == 17 {
			if !errors.Is(err, lock.ErrLost) {
				t.Fatalf("the force-released grant: Renew = %v, want ErrLost", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("grant %d: Renew = %v, want nil: one lost grant ended others", i, err)
		}
	}
	select { // Renew found it lost (the Lock has no release watch yet)
	case <-victim.(lock.LossNotifier).Lost():
	default:
		t.Fatal("Lost not closed after Renew reported the loss")
	}
	next, err := operator.TryAcquire(ctx, victim.Key(), time.Minute)
	if err != nil {
		t.Fatalf("the force-released key is not free: %v", err)
	}
	if next.Token() <= victim.Token() {
		t.Fatalf("token %d after ForceRelease, want > %d", next.Token(), victim.Token())
	}
	if err := victim.Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release of the force-released grant: %v, want ErrLost", err)
	}
	if err := victim.Extend(ctx, 20*time.Second); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of the force-released grant: %v, want ErrLost", err)
	}
	// An operator's delete (etcdctl del) of another grant: its own Extend,
	// a keepalive of a lease that lives on, still sees it gone.
	c := newClient(t, srv.Endpoints())
	if _, err := c.Delete(ctx, etcdlock.DefaultPrefix+hs[3].Key()+"\x00\x01", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if err := hs[3].Extend(ctx, 20*time.Second); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of a deleted grant on a living lease: %v, want ErrLost", err)
	}
	for i, h := range hs {
		if i == 17 || i == 3 {
			continue
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("Release of grant %d: %v", i, err)
		}
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A batch handle is a full handle: Extend with the batch's ttl keeps it
// (and its lease); Extend with another ttl moves its key to a lease of
// its own, keeping its token, after which Renew renews it by itself and
// its Release leaves the batch's lease and other grants alone. A Release
// deletes its key only. Handles not made by the batch are refused with
// ErrInvalidArgument; released ones are ErrLost.
func TestBatchHandles(t *testing.T) {
	srv := testenv.Etcd(t)
	l := newLock(t, srv.Endpoints())
	other := newLock(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	b := newBatch(t, l, 10*time.Second)
	p := "batch/" + runID(t)
	hs := fill(t, ctx, b, p, 5)
	if _, err := b.TryAcquire(ctx, p+"0"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a key the batch holds: %v, want ErrNotAcquired", err)
	}
	if _, err := other.TryAcquire(ctx, p+"0", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("another Lock's TryAcquire of a batch's key: %v, want ErrNotAcquired", err)
	}
	if err := hs[0].Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend with the batch's ttl: %v", err)
	}
	token := hs[1].Token()
	if err := hs[1].Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend with another ttl: %v", err)
	}
	if vu := time.Until(hs[1].ValidUntil()); vu < 55*time.Second {
		t.Fatalf("ValidUntil %v after Extend(1m)", vu)
	}
	g, ok, err := l.Inspect(ctx, hs[1].Key())
	if err != nil || !ok || g.Token != token || g.Remaining < 50*time.Second {
		t.Fatalf("Inspect after the move = %+v, %v, %v; want token %d on a lease of a minute", g, ok, err, token)
	}
	if err := hs[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	mine, err := other.TryAcquire(ctx, "batch/foreign/"+runID(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mine.Release(ctx) }()
	errs := b.Renew(ctx, append(hs, mine))
	for i, err := range errs {
		switch {
		case i == 2:
			if !errors.Is(err, lock.ErrLost) {
				t.Errorf("Renew of a released grant: %v, want ErrLost", err)
			}
		case i == len(hs):
			if !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("Renew of another Lock's grant: %v, want ErrInvalidArgument", err)
			}
		case err != nil:
			t.Errorf("Renew of grant %d: %v", i, err)
		}
	}
	// Renewed for the batch's ttl: the moved grant too.
	if vu := time.Until(hs[1].ValidUntil()); vu > 11*time.Second {
		t.Errorf("the moved grant's ValidUntil %v after Renew, want the batch's 10 s", vu)
	}
	if err := hs[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 3, 4} {
		if err := hs[i].Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("grant %d after the others' releases: %v", i, err)
		}
	}
	h, err := other.TryAcquire(ctx, p+"2", time.Minute)
	if err != nil {
		t.Fatalf("a released batch grant's key: %v", err)
	}
	_ = h.Release(ctx)
}

// Close revokes the batch's leases: every key still held is free at once,
// the handles' Extend and Release return ErrLost, and the batch refuses
// further use.
func TestBatchClose(t *testing.T) {
	srv := testenv.Etcd(t)
	l, other := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	b, err := l.NewBatch(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := "batch/" + runID(t)
	hs := fill(t, ctx, b, p, 20)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, h := range hs {
		g, err := other.TryAcquire(ctx, h.Key(), time.Minute)
		if err != nil {
			t.Fatalf("key %d after Close: %v", i, err)
		}
		_ = g.Release(ctx)
	}
	if err := hs[0].Extend(ctx, time.Minute); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend after Close: %v, want ErrLost", err)
	}
	if err := hs[1].Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release after Close: %v, want ErrLost", err)
	}
	if _, err := b.TryAcquire(ctx, p+"new"); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire after Close: %v, want ErrInvalidArgument", err)
	}
	for _, err := range b.Renew(ctx, hs[2:]) {
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Fatalf("Renew after Close: %v, want ErrInvalidArgument", err)
		}
	}
}

// A batch whose server stops answering: Renew ends with ctx, every grant
// unknown (not lost) and its ValidUntil unchanged, and the grants end at
// their ValidUntil: no one else gets a key before it, and each is free
// within the lease's ttl (rounded up to whole seconds) and etcd's expiry
// check after it.
func TestBatchStalled(t *testing.T) {
	srv := testenv.Etcd(t)
	p := faultproxy.Start(t, srv.Endpoints()[0])
	l := newLock(t, []string{p.Addr()})
	other := newLock(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	const ttl = 1500 * time.Millisecond // a lease of 2 s
	b := newBatch(t, l, ttl)
	prefix := "batch/" + runID(t)
	hs := fill(t, ctx, b, prefix, 10)
	for i, err := range b.Renew(ctx, hs) {
		if err != nil {
			t.Fatalf("Renew %d: %v", i, err)
		}
	}
	vus := make([]time.Time, len(hs))
	for i, h := range hs {
		vus[i] = h.ValidUntil()
	}
	p.SetMode(faultproxy.Blackhole)
	defer p.SetMode(faultproxy.Pass)
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	errs := b.Renew(rctx, hs)
	cancel()
	if d := time.Since(start); d > 700*time.Millisecond {
		t.Errorf("Renew on a stalled server returned after %v, past its 200 ms deadline", d)
	}
	for i, err := range errs {
		if err == nil || errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("Renew %d on a stalled server: %v, want unknown (ErrUnavailable)", i, err)
		}
		if !hs[i].ValidUntil().Equal(vus[i]) {
			t.Fatalf("grant %d: ValidUntil moved by a failed Renew", i)
		}
	}
	// The keys are still held until ValidUntil.
	if _, err := other.TryAcquire(ctx, hs[0].Key(), time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a stalled batch's key before its ValidUntil: %v", err)
	}
	const slack = 2*time.Second + 500*time.Millisecond // the lease's ttl rounded up, and etcd's expiry check
	for i, h := range hs {
		actx, cancel := context.WithDeadline(ctx, vus[i].Add(slack))
		g, err := lock.Acquire(actx, other, h.Key(), time.Minute)
		at := time.Now()
		cancel()
		if err != nil {
			t.Fatalf("key %d not free within %v of its ValidUntil: %v", i, slack, err)
		}
		if at.Before(vus[i]) {
			t.Fatalf("key %d granted to another %v before the stalled grant's ValidUntil", i, vus[i].Sub(at))
		}
		_ = g.Release(ctx)
	}
}

// On a 3-member cluster a batch's grants survive the leader's death: the
// Renews during the election are unknown, never lost, and one succeeds
// (on the new leader, which restarted every lease's countdown) before the
// grants' ValidUntil; a force-released grant is still lost alone.
func TestBatchClusterLeaderKilled(t *testing.T) {
	srv := testenv.NewEtcd(t, testenv.Members(3))
	c := newClient(t, srv.Endpoints())
	l, operator := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	const ttl = 3 * time.Second
	b := newBatch(t, l, ttl)
	hs := fill(t, ctx, b, "batch/"+runID(t), 300)
	if ok, err := operator.ForceRelease(ctx, hs[0].Key()); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	renew := func() (ok bool) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ok = true
		for i, err := range b.Renew(rctx, hs) {
			switch {
			case i == 0:
				if !errors.Is(err, lock.ErrLost) {
					t.Fatalf("the force-released grant: %v, want ErrLost", err)
				}
			case errors.Is(err, lock.ErrLost):
				t.Fatalf("grant %d lost: %v", i, err)
			case err != nil:
				ok = false
			}
		}
		return ok
	}
	if !renew() {
		t.Fatal("Renew on a healthy cluster failed")
	}
	vu := hs[1].ValidUntil()
	srv.StopMember(t, leader(t, c, srv))
	failed := 0
	for !renew() {
		failed++
		if time.Now().After(vu) {
			t.Fatalf("no successful Renew before ValidUntil")
		}
		_ = backendkit.Sleep(ctx, 100*time.Millisecond)
	}
	t.Logf("%d Renews unknown after the leader was killed, then renewed with %v left", failed, time.Until(vu).Round(time.Millisecond))
	if !hs[1].ValidUntil().After(vu) {
		t.Fatal("ValidUntil did not move on after the leader change")
	}
	for _, h := range hs[1:] {
		if _, err := operator.TryAcquire(ctx, h.Key(), ttl); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("a batch grant's key taken after the leader change: %v", err)
		}
	}
}

// BenchmarkRenewBatch is one Renew of N grants of one batch: ceil(N/2000)
// keepalives on one stream and as many reads of the leases' keys.
func BenchmarkRenewBatch(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run("N="+strconv.Itoa(n), func(b *testing.B) {
			l := newLock(b, testenv.Etcd(b).Endpoints())
			ctx := context.Background()
			bt := newBatch(b, l, time.Minute)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			hs := fill(b, ctx, bt, "bench/batch/"+runID(b), n)
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportAllocs()
			for b.Loop() {
				for i, err := range bt.Renew(ctx, hs) {
					if err != nil {
						b.Fatalf("grant %d: %v", i, err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n)*1000, "ns/grant")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/held-grant")
		})
	}
}

// A batch left without Renew past its ttl: its lease expires with the
// grant on it (the key is free for others after its ValidUntil), and the
// batch's next TryAcquire finds the lease gone and makes a new one.
func TestBatchIdle(t *testing.T) {
	srv := testenv.Etcd(t)
	l, other := newLock(t, srv.Endpoints()), newLock(t, srv.Endpoints())
	ctx := ctxFor(t, 30*time.Second)
	b := newBatch(t, l, time.Second)
	p := "batch/" + runID(t)
	hs := fill(t, ctx, b, p, 2)
	if err := hs[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := lock.Acquire(ctx, other, hs[1].Key(), time.Minute)
	if err != nil {
		t.Fatalf("an unrenewed batch grant's key did not come free: %v", err)
	}
	if time.Now().Before(hs[1].ValidUntil()) {
		t.Fatalf("the key was granted to another before the batch grant's ValidUntil")
	}
	_ = g.Release(ctx)
	h, err := b.TryAcquire(ctx, p+"new")
	if err != nil {
		t.Fatalf("TryAcquire after the batch's lease expired: %v", err)
	}
	if err := b.Renew(ctx, []lock.Handle{h})[0]; err != nil {
		t.Fatalf("Renew of the new grant: %v", err)
	}
	if err := hs[1].Extend(ctx, time.Second); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend of the expired grant: %v, want ErrLost", err)
	}
}

// A grant made on a batch lease last renewed more than ttl/2 ago is not
// cut short by the lease's nearer end: TryAcquire renews the lease first
// (without it, ValidUntil was the old lease's end, here under 0.8 s away
// for a ttl of 2 s).
func TestBatchAgingLease(t *testing.T) {
	l := newLock(t, testenv.Etcd(t).Endpoints())
	ctx := ctxFor(t, 30*time.Second)
	const ttl = 2 * time.Second
	b := newBatch(t, l, ttl)
	p := "batch/" + runID(t)
	fill(t, ctx, b, p, 1)
	_ = backendkit.Sleep(ctx, 1200*time.Millisecond) // the lease ages past ttl/2: not a synchronisation
	before := time.Now()
	h, err := b.TryAcquire(ctx, p+"late")
	if err != nil {
		t.Fatal(err)
	}
	if vu := h.ValidUntil(); vu.Before(before.Add(ttl - backendkit.DriftAllowance(ttl))) {
		t.Fatalf("a grant on an aging lease is valid for %v, want the batch's ttl %v less the drift", vu.Sub(before), ttl)
	}
}

// gatedReleases is an etcd Lock whose ReleaseEach waits for gate once it
// has said so on in.
type gatedReleases struct {
	*etcdlock.Lock
	gate chan struct{}
	in   chan struct{}
}

func (g *gatedReleases) ReleaseEach(ctx context.Context, hs []lock.Handle) []error {
	g.in <- struct{}{}
	<-g.gate
	return g.Lock.ReleaseEach(ctx, hs)
}

// A Keeper's Close waits for a Release of its leases already under way
// before it closes the Batch, whose close revokes the etcd leases the
// grants live on: the Release then found its grant gone and reported
// ErrLost (work may have overlapped), though no one had taken it.
func TestKeeperCloseLetsTheReleasesUnderWayFinish(t *testing.T) {
	l := newLock(t, testenv.Etcd(t).Endpoints())
	g := &gatedReleases{Lock: l, gate: make(chan struct{}), in: make(chan struct{}, 4)}
	ctx := ctxFor(t, time.Minute)
	k, err := lock.NewKeeper(g, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a, err := k.TryAcquire(ctx, runID(t)+"a")
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- a.Release(ctx) }()
	<-g.in // a's release is under way
	closed := make(chan error, 1)
	go func() { closed <- k.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the Release under way", err)
	case <-time.After(100 * time.Millisecond): // Close would have revoked the leases by now: a bound on a wrong outcome, not a synchronisation
	}
	close(g.gate)
	if err := <-released; err != nil {
		t.Fatalf("Release of a lease no one took: %v; want nil", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}
