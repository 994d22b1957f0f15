package redislock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// TestTryAcquireAnyStartsAtARandomKey: with every key free, the key granted
// is the one at the random start offset, so over many calls the grants
// spread over all keys instead of piling on the first.
func TestTryAcquireAnyStartsAtARandomKey(t *testing.T) {
	l := newLock(t, newClient(t, testenv.Redis(t).Addr()))
	ctx := t.Context()
	const slots, calls = 4, 200
	prefix := "multilock/{" + lock.NewOwner() + "}/"
	keys := make([]string, slots)
	index := map[string]int{}
	for i := range keys {
		keys[i] = fmt.Sprint(prefix, i)
		index[keys[i]] = i
	}
	var granted [slots]int
	for range calls {
		h, err := l.TryAcquireAny(ctx, keys, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		granted[index[h.Key()]]++
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Uniform: 50 each, standard deviation about 6; below 17 is more than
	// five deviations away (odds under 1e-6 per key).
	for i, n := range granted {
		if n < calls/slots/3 {
			t.Fatalf("slot %d granted %d times of %d, want about %d each: %v", i, n, calls, calls/slots, granted)
		}
	}
}
