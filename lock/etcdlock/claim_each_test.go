package etcdlock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// ClaimEach makes 200 claims in ceil(200/MaxClaimsPerTxn) Txns, one round
// trip each, instead of one per claim: a free key is claimed with a token
// above every earlier grant's of it, a held key (or one claimed already)
// is refused with ErrNotAcquired and a hint, a key twice in the call is
// claimed once, and a bad request is refused alone. The claims are what
// the generic path (TryAcquire left to lapse) makes: Inspect sees each,
// with the Lock's owner, for its ttl.
func TestClaimEach(t *testing.T) {
	srv := testenv.Etcd(t)
	l, rc := countingLock(t, srv.Endpoints())
	other := newLock(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	p := "claims/" + runID(t)
	earlier, err := other.TryAcquire(ctx, p+"0", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := earlier.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := other.TryAcquire(ctx, p+"1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	const n = 200
	reqs := make([]lock.ClaimRequest, n)
	for i := range reqs {
		reqs[i] = lock.ClaimRequest{Key: p + strconv.Itoa(i), TTL: time.Duration(2+i%2) * time.Second}
	}
	reqs[150].Key = p + "7" // twice in the call
	reqs[160].TTL = 0       // refused alone
	before := rc.counts()
	res := l.ClaimEach(context.WithValue(ctx, callerKey{}, true), reqs)
	got := rc.counts()
	for k, v := range before {
		got[k] -= v
	}
	txns := (n + etcdlock.MaxClaimsPerTxn - 1) / etcdlock.MaxClaimsPerTxn
	if got["/etcdserverpb.KV/Txn"] != txns {
		t.Errorf("%d claims made %v; want %d Txns", n, got, txns)
	}
	for i, r := range res {
		switch i {
		case 1:
			if !errors.Is(r.Err, lock.ErrNotAcquired) || lock.RemainingTTL(r.Err) < 50*time.Second {
				t.Errorf("claim of a held key: %v (hint %v), want ErrNotAcquired with a hint of about a minute", r.Err, lock.RemainingTTL(r.Err))
			}
		case 150:
			if !errors.Is(r.Err, lock.ErrNotAcquired) {
				t.Errorf("second claim of a key in one call: %v, want ErrNotAcquired", r.Err)
			}
		case 160:
			if !errors.Is(r.Err, lock.ErrInvalidTTL) {
				t.Errorf("claim with ttl 0: %v, want ErrInvalidTTL", r.Err)
			}
		default:
			if r.Err != nil || r.Token == 0 {
				t.Fatalf("claim %d: %+v", i, r)
			}
		}
	}
	if res[0].Token <= earlier.Token() {
		t.Errorf("claim token %d, want above the earlier grant's %d", res[0].Token, earlier.Token())
	}
	for _, i := range []int{0, 7, 99, 199} {
		g, ok, err := other.Inspect(ctx, reqs[i].Key)
		if err != nil || !ok || g.Token != res[i].Token || g.Owner != l.Owner() || g.Remaining > reqs[i].TTL {
			t.Errorf("Inspect of claim %d = %+v, %v, %v; want token %d, owner %s, within %v", i, g, ok, err, res[i].Token, l.Owner(), reqs[i].TTL)
		}
	}
	// Claimed keys are held: a second ClaimEach is refused on each.
	again := l.ClaimEach(ctx, reqs[:3])
	for i, r := range again {
		if !errors.Is(r.Err, lock.ErrNotAcquired) {
			t.Errorf("claiming key %d again: %v, want ErrNotAcquired", i, r.Err)
		}
	}
	// And lock.ClaimEach goes through it.
	if r := lock.ClaimEach(ctx, l, []lock.ClaimRequest{{Key: p + "generic", TTL: time.Second}}); r[0].Err != nil || r[0].Token == 0 {
		t.Errorf("lock.ClaimEach: %+v", r[0])
	}
}
