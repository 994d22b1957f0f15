package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// claim checks lock.Claim, on a lock.Claimer or through its TryAcquire
// fallback: a claim excludes other claims of the key until its ttl has
// passed (never before), Inspect shows it, the next claim has a larger
// token, and bad input is refused.
func (s *suite) claim(t *testing.T) {
	a, b := s.newLock(t), s.newLock(t)
	key := s.key(t, "k")
	ttl := s.cfg.ttl
	ctx := ctxFor(t, s.cfg.waitBound)
	sent := time.Now()
	first, err := lock.Claim(ctx, a, key, ttl)
	if err != nil {
		t.Fatalf("Claim of a free key: %v", err)
	}
	if _, err := lock.Claim(ctx, b, key, ttl); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second Claim of a claimed key: %v, want ErrNotAcquired", err)
	}
	if in, ok := b.(lock.Inspector); ok {
		g, found, err := in.Inspect(ctx, key)
		if err != nil || !found || g.Token != first || g.Owner == "" {
			t.Fatalf("Inspect of a claimed key: %+v found %v err %v, want token %d and an owner", g, found, err, first)
		}
	}
	for {
		second, err := lock.Claim(ctx, b, key, ttl)
		if err == nil {
			if early := time.Until(backendkit.ValidUntil(sent, ttl)); early > 0 {
				t.Fatalf("claimed again %v before the first claim's ttl ended", early)
			}
			if second <= first {
				t.Fatalf("token %d of the second claim is not above the first's %d", second, first)
			}
			break
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("Claim: %v", err)
		}
		if time.Since(sent) > ttl+s.cfg.slack {
			t.Fatalf("the key is still claimed %v after a claim of ttl %v", time.Since(sent), ttl)
		}
		time.Sleep(5 * time.Millisecond) // polling with a bound
	}
	if _, err := lock.Claim(ctx, a, "", ttl); !errors.Is(err, lock.ErrInvalidKey) {
		t.Errorf("Claim of an empty key: %v, want ErrInvalidKey", err)
	}
	if _, err := lock.Claim(ctx, a, key+"/ttl", 0); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("Claim with ttl 0: %v, want ErrInvalidTTL", err)
	}
	if _, err := lock.Claim(context.Background(), nil, key, ttl); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Claim on a nil Lock: %v, want ErrInvalidArgument", err)
	}
}
