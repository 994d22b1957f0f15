package backendkit_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold-go/leasehold/internal/testkit"
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
	l := testkit.Must(memlock.New())
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
	l := testkit.Must(memlock.New())
	h, err := backendkit.AcquireWith(t.Context(), l, []string{"k"}, func(ctx context.Context) (lock.Handle, error) {
		return l.TryAcquire(ctx, "k", time.Minute)
	})
	if err != nil || h.Key() != "k" {
		t.Fatalf("AcquireWith: %v", err)
	}
}

// Every package's input errors name the package, and still match lock's
// sentinels: the caller can tell which package refused what.
func TestInvalidNamesThePackage(t *testing.T) {
	for _, c := range []struct {
		err  error
		msg  string
		want error
	}{
		{backendkit.Invalid("timers", "timer %q: nil function", "x"), `timers: invalid argument: timer "x": nil function`, lock.ErrInvalidArgument},
		{backendkit.Invalid("jobs", "WithTTL: %w", lock.DefaultLimits.CheckTTL(0)), "jobs: invalid ttl: WithTTL: ttl must be positive, got 0s", lock.ErrInvalidTTL},
		{backendkit.Invalid("leader", "%w", lock.DefaultLimits.CheckTTL(0)), "leader: invalid ttl: ttl must be positive, got 0s", lock.ErrInvalidTTL},
		{backendkit.Invalid("semaphore", "%w", backendkit.CheckName("semaphore name", "")), "semaphore: invalid argument: " + strings.TrimPrefix(backendkit.CheckName("semaphore name", "").Error(), "lock: invalid argument: "), lock.ErrInvalidArgument},
	} {
		if !errors.Is(c.err, c.want) || !errors.Is(c.err, lock.ErrInvalidArgument) {
			t.Errorf("%v does not match %v", c.err, c.want)
		}
		if c.err.Error() != c.msg {
			t.Errorf("message %q, want %q", c.err, c.msg)
		}
	}
}

type settings struct{ n int }

type option func(*settings) error

func TestApply(t *testing.T) {
	var s settings
	set := func(n int) option {
		return func(s *settings) error {
			if n < 0 {
				return errors.New("n is negative")
			}
			s.n = n
			return nil
		}
	}
	if err := backendkit.Apply("pkg", &s, []option{set(1), set(2)}); err != nil || s.n != 2 {
		t.Errorf("Apply: %v, n = %d, want nil, 2 (in order)", err, s.n)
	}
	err := backendkit.Apply("pkg", &s, []option{set(-1)})
	if !errors.Is(err, lock.ErrInvalidArgument) || err.Error() != "pkg: invalid argument: n is negative" {
		t.Errorf("Apply of a refused option: %v", err)
	}
	if err := backendkit.Apply("pkg", &s, []option{nil}); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Apply of a nil option: %v", err)
	}
}

func TestResolve(t *testing.T) {
	c, err := backendkit.Resolve("pkg", lock.Common{}, "")
	if err != nil || c.Owner == "" || c.Logger == nil || c.MeterProvider == nil || c.TracerProvider == nil {
		t.Errorf("Resolve of the zero Common: %+v, %v; want every default", c, err)
	}
	if c, _ := backendkit.Resolve("pkg", lock.Common{}, "the-lock's"); c.Owner != "the-lock's" {
		t.Errorf("default owner %q, want the one given", c.Owner)
	}
	if c, _ := backendkit.Resolve("pkg", lock.Common{Owner: "mine"}, "the-lock's"); c.Owner != "mine" {
		t.Errorf("owner %q, want the configured one", c.Owner)
	}
	if _, err := backendkit.Resolve("pkg", lock.Common{Owner: "a\nb"}, ""); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Resolve of a bad owner: %v", err)
	}
	l := testkit.Must(memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"})))
	if c, err := backendkit.ResolveOn("pkg", lock.Common{}, l); err != nil || c.Owner != "host-a" {
		t.Errorf("ResolveOn: owner %q, %v; want the Lock's", c.Owner, err)
	}
	if _, err := backendkit.ResolveOn("pkg", lock.Common{Owner: "host-a"}, l); err != nil {
		t.Errorf("ResolveOn with the Lock's own owner: %v", err)
	}
	if _, err := backendkit.ResolveOn("pkg", lock.Common{Owner: "someone-else"}, l); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("ResolveOn with another owner: %v, want it refused", err)
	}
}
