package backendkit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// A remaining ttl a backend read from its server (any client may have
// written it) is bounded: backendkit.RemainingMillis and backendkit.NotAcquired never
// give a negative or overflowed hint.
func TestRemainingBounds(t *testing.T) {
	for ms, want := range map[int64]time.Duration{
		-5: 0, 0: 0, 1500: 1500 * time.Millisecond,
		math.MaxInt64: lock.MaxTTL, 9e15: lock.MaxTTL,
	} {
		if got := backendkit.RemainingMillis(ms); got != want {
			t.Errorf("RemainingMillis(%d) = %v, want %v", ms, got, want)
		}
	}
	for d, want := range map[time.Duration]time.Duration{-time.Second: 0, math.MaxInt64: lock.MaxTTL, time.Second: time.Second} {
		if got := lock.RemainingTTL(backendkit.NotAcquired("k", d)); got != want {
			t.Errorf("NotAcquired(%v) hint %v, want %v", d, got, want)
		}
	}
}

// A TryAcquireAny over every key finds them all held: the error names the
// keys, but within a few hundred bytes, not MaxKeys × MaxKeyLen (4 MiB per
// failed attempt of a waiting semaphore).
func TestNotAcquiredAnyIsBounded(t *testing.T) {
	l := memlock.New()
	ctx := t.Context()
	long := strings.Repeat("k", lock.MaxKeyLen-8)
	keys := make([]string, lock.MaxKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", long, i)
		if _, err := l.TryAcquire(ctx, keys[i], time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	_, err := l.TryAcquireAny(ctx, keys, time.Minute)
	if !errors.Is(err, lock.ErrNotAcquired) || lock.RemainingTTL(err) <= 0 {
		t.Fatalf("TryAcquireAny with every key held: %v", err)
	}
	if n := len(err.Error()); n > 4*lock.MaxKeyLen {
		t.Fatalf("the error is %d bytes long", n)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("(%d keys)", lock.MaxKeys)) {
		t.Fatalf("the error does not count the keys: %.300s", err)
	}
	for keys, want := range map[string]string{"a,b,c": "a,b,c", long: long} {
		var na *lock.NotAcquiredError
		if !errors.As(backendkit.NotAcquiredAny(strings.Split(keys, ","), 0), &na) || na.Key != want {
			t.Errorf("NotAcquiredAny(%.20q).Key = %.20q, want %.20q", keys, na.Key, want)
		}
	}
}

// The functions whose only copy lives in package lock reach it: the
// errors match lock's sentinels, the token is the one lock.TokenFrom reads.
func TestSharedWithLock(t *testing.T) {
	if err := backendkit.Lost("gone"); !errors.Is(err, lock.ErrLost) || err.Error() != "lock: grant lost: gone" {
		t.Errorf("Lost: %v", err)
	}
	var nilCtx context.Context
	if err := backendkit.CheckContext(nilCtx); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("CheckContext(nil): %v", err)
	}
	if err := backendkit.Validate(t.Context(), "k", -1, lock.DefaultLimits); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("Validate with ttl -1: %v", err)
	}
	if token, ok := lock.TokenFrom(backendkit.ContextWithToken(t.Context(), 42)); token != 42 || !ok {
		t.Errorf("TokenFrom(ContextWithToken(42)) = %d, %v", token, ok)
	}
	cfg, err := lock.NewConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := memlock.New()
	h, err := backendkit.AcquireWith(t.Context(), cfg, l, []string{"k"}, func(ctx context.Context) (lock.Handle, error) {
		return l.TryAcquire(ctx, "k", time.Minute)
	})
	if err != nil || h.Key() != "k" {
		t.Fatalf("AcquireWith: %v", err)
	}
}
