package semaphore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// SlotRequest is one request of TryAcquireEach: a free slot of Sem for TTL.
type SlotRequest struct {
	Sem *Semaphore
	TTL time.Duration
}

// SlotResult is one request's outcome: the Permit, or Err
// (lock.ErrNotAcquired when every slot was held).
type SlotResult struct {
	Permit *Permit
	Err    error
}

// TryAcquireEach is TryAcquire for many semaphores of one Lock (an error
// that matches lock.ErrInvalidArgument in every result otherwise; Locks
// are one when ==, and a Lock whose value is not comparable, as one that
// holds a map, a slice or a func, even in an interface field, is never
// one with another: pass it by pointer), in one
// lock.TryAcquireAnyEach: on a backend with lock.AnyEachAcquirer (memlock,
// redislock) that is one round trip per chunk of requests, on the others
// one TryAcquireAny per request, 16 at once. It returns one result per
// request, in order; a bad request (a nil Sem, a bad ttl) fails alone.
// Sizes are declared and checked as TryAcquire does (at a semaphore's
// first use, and when it finds every slot held, unless WithoutSizeCheck),
// and the metrics are TryAcquire's. A semaphore larger than the Lock's
// Limits().MaxKeys (never on a built-in backend) is tried on its own, by
// TryAcquire. The permits are not renewed, as TryAcquire's.
func TryAcquireEach(ctx context.Context, reqs []SlotRequest) []SlotResult {
	res := make([]SlotResult, len(reqs))
	var l lock.Lock
	for _, r := range reqs {
		if r.Sem == nil {
			continue
		}
		if l == nil {
			l = r.Sem.l
		} else if !same(l, r.Sem.l) {
			for i := range res {
				res[i].Err = backendkit.Invalid("semaphore", "TryAcquireEach: the semaphores are not all of one Lock")
			}
			return res
		}
	}
	if l == nil {
		for i := range res {
			res[i].Err = backendkit.Invalid("semaphore", "TryAcquireEach: nil Semaphore")
		}
		return res
	}
	lim := lock.LimitsOf(l)
	anyReqs := make([]lock.AnyRequest, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i, r := range reqs {
		s := r.Sem
		switch {
		case s == nil:
			res[i].Err = backendkit.Invalid("semaphore", "TryAcquireEach: nil Semaphore")
			continue
		case s.size > lim.MaxKeys:
			res[i].Permit, res[i].Err = s.TryAcquire(ctx, r.TTL)
			continue
		}
		if err := backendkit.Validate(ctx, s.keys[0], r.TTL, lim); err != nil {
			res[i].Err = err
			continue
		}
		if err := s.firstUse(ctx); err != nil {
			res[i].Err = err
			continue
		}
		anyReqs = append(anyReqs, lock.AnyRequest{Keys: s.keys, TTL: r.TTL})
		at = append(at, i)
	}
	if len(anyReqs) == 0 {
		return res
	}
	for j, r := range lock.TryAcquireAnyEach(ctx, l, anyReqs) {
		i := at[j]
		res[i].Permit, res[i].Err = reqs[i].Sem.granted(ctx, r.Handle, r.Err)
	}
	return res
}

// granted turns the outcome of one attempt at a slot of s into a Permit,
// as TryAcquire does: a refusal is counted, and checks the sizes unless
// WithoutSizeCheck.
func (s *Semaphore) granted(ctx context.Context, h lock.Handle, err error) (*Permit, error) {
	if errors.Is(err, lock.ErrNotAcquired) {
		s.metric.reject(ctx)
		if !s.noCheck {
			if cerr := s.check(ctx); cerr != nil {
				return nil, cerr
			}
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	return s.permit(ctx, h)
}

// permit makes h, a grant of one of s's slots, a Permit, and counts it
// held; a grant of another key (a faulty backend) is released again.
func (s *Semaphore) permit(ctx context.Context, h lock.Handle) (*Permit, error) {
	slot, ok := s.slotOf(h.Key())
	if !ok {
		_ = h.Release(ctx)
		return nil, fmt.Errorf("semaphore: the backend granted %q, not one of the slots", h.Key())
	}
	s.metric.addHeld(ctx, 1)
	return &Permit{Handle: h, slot: slot, sem: s}, nil
}
