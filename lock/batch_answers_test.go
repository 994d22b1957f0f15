package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// misanswering is a Lock whose batch calls answer a wrong number of
// requests: answers (the first n, or n more than asked, as extra says).
type misanswering struct {
	lock.Lock
	extra int // answers beyond (> 0) or short of (< 0) the requests
}

func fitTo[T any](n, extra int) []T { return make([]T, max(0, n+extra)) }

func (m misanswering) ClaimEach(_ context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	out := fitTo[lock.ClaimResult](len(reqs), m.extra)
	for i := range out {
		out[i].Token = uint64(i + 1)
	}
	return out
}

func (m misanswering) ReleaseEach(_ context.Context, hs []lock.Handle) []error {
	return fitTo[error](len(hs), m.extra)
}

// TryAcquireAnyEach refuses every request, but for an extra answer, which
// holds a grant of "extra/<i>" for an hour.
func (m misanswering) TryAcquireAnyEach(ctx context.Context, reqs []lock.AnyRequest) []lock.AnyResult {
	out := fitTo[lock.AnyResult](len(reqs), m.extra)
	for i := range out {
		if i < len(reqs) {
			out[i].Err = lock.ErrNotAcquired
			continue
		}
		out[i].Handle, out[i].Err = m.Lock.TryAcquire(ctx, fmt.Sprintf("extra/%d", i), time.Hour)
	}
	return out
}

// A backend whose batch answers are short or long cannot make a request
// look granted, nor crash the caller: the unanswered requests get an
// error matching ErrUnavailable (unknown outcome), extra answers are
// dropped, and the grants they hold released. Before, a short ClaimEach answer read as claims made with
// token 0, a short ReleaseEach answer as releases done, and an empty one
// for a lone handle (a Keeper's release) panicked.
func TestBatchAnswersOnePerRequest(t *testing.T) {
	ctx := t.Context()
	inner := testkit.Must(memlock.New())
	for _, extra := range []int{-1, -3, 2} {
		l := misanswering{Lock: inner, extra: extra}
		claims := lock.ClaimEach(ctx, l, []lock.ClaimRequest{{Key: "a", TTL: time.Second}, {Key: "b", TTL: time.Second}, {Key: "c", TTL: time.Second}})
		if len(claims) != 3 {
			t.Fatalf("extra %d: ClaimEach gave %d results for 3 requests", extra, len(claims))
		}
		for i, r := range claims {
			if answered := i < 3+extra; answered != (r.Err == nil) || (!answered && !errors.Is(r.Err, lock.ErrUnavailable)) {
				t.Errorf("extra %d: claim %d: token %d, err %v", extra, i, r.Token, r.Err)
			}
		}
		acq := lock.TryAcquireAnyEach(ctx, l, []lock.AnyRequest{{Keys: []string{"a"}, TTL: time.Second}, {Keys: []string{"b"}, TTL: time.Second}, {Keys: []string{"c"}, TTL: time.Second}})
		for i, r := range acq {
			if r.Handle != nil || r.Err == nil {
				t.Errorf("extra %d: acquire %d: %v, %v", extra, i, r.Handle, r.Err)
			}
		}
		for i := 3; i < 3+extra; i++ { // the grants of extra answers are released
			h, err := inner.TryAcquire(ctx, fmt.Sprintf("extra/%d", i), time.Second)
			if err != nil {
				t.Errorf("the grant of an extra answer is still held: %v", err)
				continue
			}
			_ = h.Release(ctx)
		}
		var hs []lock.Handle
		for _, k := range []string{"x", "y", "z"} {
			hs = append(hs, testkit.Must(inner.TryAcquire(ctx, k, time.Second)))
		}
		errs := lock.ReleaseEach(ctx, l, hs)
		if len(errs) != 3 {
			t.Fatalf("extra %d: ReleaseEach gave %d outcomes for 3 handles", extra, len(errs))
		}
		for i, err := range errs {
			if answered := i < 3+extra; answered != (err == nil) || (!answered && !errors.Is(err, lock.ErrUnavailable)) {
				t.Errorf("extra %d: release %d: %v", extra, i, err)
			}
		}
		if err := lock.ReleaseEach(ctx, l, hs[:1])[0]; extra < 0 && !errors.Is(err, lock.ErrUnavailable) {
			t.Errorf("extra %d: the release of a lone handle: %v", extra, err)
		}
		for _, h := range hs {
			_ = h.Release(ctx)
		}
	}
}
