package pglock_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// ClaimEach makes Claim's claims, in one statement per chunk of
// pglock.ClaimChunk: a free key is claimed with a token from the grants'
// sequence, a claimed one refused, a lapsed one claimed again, a key asked
// twice claimed once, a bad request refused alone.
func TestClaimEach(t *testing.T) {
	srv := testenv.Postgres(t)
	l, writes := countingLock(t, srv.DSN())
	other := newLock(t, srv.DSN())
	ctx := ctxFor(t, time.Minute)
	prefix := "claim-each/" + lock.NewOwner()
	held, err := other.Claim(ctx, prefix+"/held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Claim(ctx, prefix+"/lapsed", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	g, ok, err := other.Inspect(ctx, prefix+"/lapsed")
	for ok && err == nil && g.Remaining > 0 { // a claim lapses by the server's clock
		g, ok, err = other.Inspect(ctx, prefix+"/lapsed")
	}
	if err != nil {
		t.Fatal(err)
	}
	reqs := []lock.ClaimRequest{
		{Key: prefix + "/a", TTL: time.Minute},
		{Key: prefix + "/held", TTL: time.Minute},
		{Key: prefix + "/lapsed", TTL: time.Minute},
		{Key: prefix + "/a", TTL: time.Minute},
		{Key: "", TTL: time.Minute},
		{Key: prefix + "/b", TTL: time.Millisecond},
	}
	res := l.ClaimEach(ctx, reqs)
	if res[0].Err != nil || res[0].Token <= held {
		t.Fatalf("a free key: %+v (a claim before had token %d)", res[0], held)
	}
	if !errors.Is(res[1].Err, lock.ErrNotAcquired) {
		t.Fatalf("a claimed key: %+v", res[1])
	}
	if res[2].Err != nil || res[2].Token <= held {
		t.Fatalf("a lapsed key: %+v", res[2])
	}
	if !errors.Is(res[3].Err, lock.ErrNotAcquired) {
		t.Fatalf("a key asked twice: %+v", res[3])
	}
	if !errors.Is(res[4].Err, lock.ErrInvalidKey) || !errors.Is(res[5].Err, lock.ErrInvalidTTL) {
		t.Fatalf("bad requests: %+v %+v", res[4], res[5])
	}
	if g, ok, err := other.Inspect(ctx, prefix+"/a"); err != nil || !ok || g.Token != res[0].Token || g.Owner != l.Owner() {
		t.Fatalf("Inspect of a claim made by ClaimEach: %+v %v %v", g, ok, err)
	}
	if _, err := other.Claim(ctx, prefix+"/a", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Claim of a key ClaimEach claimed: %v", err)
	}

	// 2,500 claims: three chunks, one statement (write) each.
	many := make([]lock.ClaimRequest, 2500)
	for i := range many {
		many[i] = lock.ClaimRequest{Key: fmt.Sprintf("%s/many/%d", prefix, i), TTL: time.Minute}
	}
	_ = l.ClaimEach(ctx, many[:1]) // the statement prepared on the connection
	before := writes.Load()
	res = l.ClaimEach(ctx, many[1:])
	if n, want := writes.Load()-before, int64((len(many)-1+pglock.ClaimChunk-1)/pglock.ClaimChunk); n != want {
		t.Fatalf("ClaimEach of %d: %d writes, want %d", len(many)-1, n, want)
	}
	seen := map[uint64]bool{}
	for i, r := range res {
		if r.Err != nil || seen[r.Token] {
			t.Fatalf("claim %d: %+v (token seen: %v)", i, r, seen[r.Token])
		}
		seen[r.Token] = true
	}
	for i, r := range lock.ClaimEach(ctx, other, many) {
		if !errors.Is(r.Err, lock.ErrNotAcquired) {
			t.Fatalf("claim %d again: %+v", i, r)
		}
	}
}

// Concurrent ClaimEach calls over the same keys in opposite orders: each
// key is claimed exactly once and no statement deadlocks (the rows are
// locked in the order of their ids).
func TestClaimEachConcurrent(t *testing.T) {
	srv := testenv.Postgres(t)
	prefix := "claim-each-concurrent/" + lock.NewOwner()
	const n = 400
	reqs := make([]lock.ClaimRequest, n)
	for i := range reqs {
		reqs[i] = lock.ClaimRequest{Key: fmt.Sprintf("%s/%d", prefix, i), TTL: time.Minute}
	}
	var (
		mu  sync.Mutex
		won = map[string]int{}
		wg  sync.WaitGroup
	)
	for w := range 6 {
		l := newLock(t, srv.DSN())
		mine := make([]lock.ClaimRequest, n)
		for i := range mine {
			if w%2 == 0 {
				mine[i] = reqs[i]
			} else {
				mine[i] = reqs[n-1-i]
			}
		}
		wg.Go(func() {
			for i, r := range l.ClaimEach(ctxFor(t, time.Minute), mine) {
				switch {
				case r.Err == nil:
					mu.Lock()
					won[mine[i].Key]++
					mu.Unlock()
				case !errors.Is(r.Err, lock.ErrNotAcquired):
					t.Errorf("%s: %v", mine[i].Key, r.Err)
				}
			}
		})
	}
	wg.Wait()
	for _, r := range reqs {
		if won[r.Key] != 1 {
			t.Fatalf("%s claimed %d times", r.Key, won[r.Key])
		}
	}
}
