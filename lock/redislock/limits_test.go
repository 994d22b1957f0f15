package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// A ttl above MaxTTL is refused with ErrInvalidTTL by every entry point and
// leaves the grant alone. Extend(math.MaxInt64) used to overflow the ms
// conversion into a negative PEXPIRE, which deleted the key and reported
// success; TryAcquire with it came back as ErrUnavailable, which lock.Do
// retried until its context ended.
func TestHugeTTL(t *testing.T) {
	srv := testenv.Redis(t)
	a := newLock(t, newClient(t, srv.Addr()))
	b := newLock(t, newClient(t, srv.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "limits/" + t.Name()
	h, err := a.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	for _, ttl := range []time.Duration{math.MaxInt64, redislock.MaxTTL + time.Millisecond} {
		if err := h.Extend(ctx, ttl); !errors.Is(err, lock.ErrInvalidTTL) {
			t.Fatalf("Extend(%v): %v, want ErrInvalidTTL", ttl, err)
		}
		if h2, err := b.TryAcquire(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
			if h2 != nil {
				_ = h2.Release(ctx)
			}
			t.Fatalf("after Extend(%v): another TryAcquire got %v, want ErrNotAcquired (the grant must be intact)", ttl, err)
		}
		if _, err := b.TryAcquire(ctx, key+"/other", ttl); !errors.Is(err, lock.ErrInvalidTTL) {
			t.Fatalf("TryAcquire(%v): %v, want ErrInvalidTTL", ttl, err)
		}
		if _, err := b.TryAcquireAny(ctx, []string{key + "/any"}, ttl); !errors.Is(err, lock.ErrInvalidTTL) {
			t.Fatalf("TryAcquireAny(%v): %v, want ErrInvalidTTL", ttl, err)
		}
		if _, err := b.AcquireQueued(ctx, key+"/queued", ttl); !errors.Is(err, lock.ErrInvalidTTL) {
			t.Fatalf("AcquireQueued(%v): %v, want ErrInvalidTTL", ttl, err)
		}
		if _, err := lock.Claim(ctx, b, key+"/claim", ttl); !errors.Is(err, lock.ErrInvalidTTL) {
			t.Fatalf("lock.Claim(%v): %v, want ErrInvalidTTL", ttl, err)
		}
	}
	if err := h.Extend(ctx, redislock.MaxTTL); err != nil {
		t.Fatalf("Extend(MaxTTL): %v", err)
	}
	if g, ok, err := b.Inspect(ctx, key); err != nil || !ok || g.Token != h.Token() || g.Remaining < redislock.MaxTTL-time.Minute {
		t.Fatalf("Inspect after Extend(MaxTTL): %+v %v %v", g, ok, err)
	}
}

// lock.Do with WithTTL(math.MaxInt64) fails at once with ErrInvalidTTL
// instead of retrying an unavailable backend until ctx ends.
func TestDoHugeTTL(t *testing.T) {
	srv := testenv.Redis(t)
	l := newLock(t, newClient(t, srv.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	ran := false
	err := lock.Do(ctx, l, "limits/"+t.Name(), func(context.Context) error { ran = true; return nil }, lock.WithTTL(math.MaxInt64))
	if !errors.Is(err, lock.ErrInvalidTTL) || ran {
		t.Fatalf("Do(WithTTL(MaxInt64)): %v (fn ran: %v), want ErrInvalidTTL", err, ran)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Do took %v to refuse the ttl", d)
	}
}

// Keep refuses a ttl below redislock's minimum: the lease's renewals would
// all be refused, and it used to retry them every 10 ms until ValidUntil.
func TestKeepBelowMinTTL(t *testing.T) {
	srv := testenv.Redis(t)
	l := newLock(t, newClient(t, srv.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := l.TryAcquire(ctx, "limits/"+t.Name(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	lease, err := lock.Keep(ctx, h, time.Millisecond)
	if !errors.Is(err, lock.ErrInvalidTTL) {
		if lease != nil {
			_ = lease.Release(ctx)
		}
		t.Fatalf("Keep(1ms): %v, want ErrInvalidTTL", err)
	}
}

// A remaining ttl read back from the server is untrusted: a key that some
// other client wrote with an expiry of centuries gives a hint of at most
// lock.MaxTTL, not an overflowed (negative or random) duration.
func TestForeignHugeExpiryHint(t *testing.T) {
	c, l, ctx := intruded(t)
	key := "limits/" + t.Name()
	// The lock key of key (see keys.go), written by another client.
	if err := c.Do(ctx, "SET", redislock.DefaultPrefix+"lk:{"+key+"}", "1|1|x|intruder", "PX", int64(9e15)).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.TryAcquire(ctx, key, time.Minute)
	if r := lock.RemainingTTL(err); !errors.Is(err, lock.ErrNotAcquired) || r <= 0 || r > lock.MaxTTL {
		t.Fatalf("TryAcquire of a key held for centuries: %v, hint %v; want ErrNotAcquired with a hint in (0, %v]", err, r, lock.MaxTTL)
	}
	if g, ok, err := l.Inspect(ctx, key); err != nil || !ok || g.Remaining <= 0 || g.Remaining > lock.MaxTTL {
		t.Fatalf("Inspect: %+v %v %v; want Remaining in (0, %v]", g, ok, err, lock.MaxTTL)
	}
}

// The release of a key that starts with "\x02" (the first byte of a
// handoff message on a Lock's inbox) wakes its waiters: only the inbox
// carries handoffs. The hint is an hour, so only the notification can end
// the wait in time.
func TestReleaseOfKeyLikeAHandoff(t *testing.T) {
	srv := testenv.Redis(t)
	a := newLock(t, newClient(t, srv.Addr()))
	b := newLock(t, newClient(t, srv.Addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{"\x02" + t.Name(), "\x02a\x00b\x00" + "1\x002\x003"} {
		h, err := a.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := b.Subscribe(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		err = sub.Wait(wctx, time.Hour)
		wcancel()
		_ = sub.Close()
		if err != nil {
			t.Fatalf("waiter of %q: %v; the release did not wake it", key, err)
		}
	}
}

// A fence counter that another client overwrote with something that is not
// a number counts as lost (the clock keeps tokens increasing); it made
// every acquire of the key fail in the script (ErrUnavailable, retried
// forever).
func TestForeignFenceCounter(t *testing.T) {
	c, l, ctx := intruded(t)
	key := "limits/" + t.Name()
	h, err := l.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, redislock.DefaultPrefix+"fk:{"+key+"}", "not a number", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	h2, err := l.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after the fence counter was overwritten: %v", err)
	}
	defer h2.Release(context.Background())
	if h2.Token() <= h.Token() {
		t.Fatalf("token %d after %d", h2.Token(), h.Token())
	}
}

// A queue entry that another client wrote with a ttl Redis refuses (0, or
// a number beyond any expiry) is dropped by the handoff instead of failing
// the release script, which made every Release of the key ErrUnavailable.
func TestForeignQueueEntry(t *testing.T) {
	if lock.MaxTTL != 31622400000*time.Millisecond {
		t.Fatalf("handoff.lua bounds ttls by 31622400000 ms; lock.MaxTTL is %v", lock.MaxTTL)
	}
	c, l, ctx := intruded(t)
	for i, ttl := range []string{"0", "99999999999999999999"} {
		key := "limits/" + t.Name() + "/" + ttl
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		queue, entries := redislock.DefaultPrefix+"qk:{"+key+"}", redislock.DefaultPrefix+"dk:{"+key+"}"
		if err := c.ZAdd(ctx, queue, redis.Z{Score: 1, Member: "w"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, entries, "w", "99999999999999|"+ttl+"|1|inbox|intruder").Err(); err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("case %d: Release with a forged queue entry (ttl %s): %v", i, ttl, err)
		}
		h2, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("case %d: TryAcquire after the release: %v", i, err)
		}
		_ = h2.Release(ctx)
	}
}

// intruded is the setup of the tests where another client writes this
// package's keys: that client, a Lock and a bounded context.
func intruded(t *testing.T) (*redis.Client, *redislock.Lock, context.Context) {
	c := newClient(t, testenv.Redis(t).Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c, newLock(t, c), ctx
}

// TryAcquireAny over more keys than one script takes (1024: a script over
// 4096 held keys ran ~11 ms, blocking Redis) finds the one free key
// whatever the random start, and reports every key held with a hint.
func TestTryAcquireAnyBeyondOneScript(t *testing.T) {
	_, l, ctx := intruded(t)
	const n, free = 2500, 1900
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("{%s}/%d", t.Name(), i)
		if i == free {
			continue
		}
		h, err := l.TryAcquire(ctx, keys[i], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(context.Background())
	}
	for range 5 {
		h, err := l.TryAcquireAny(ctx, keys, time.Minute)
		if err != nil || h.Key() != keys[free] {
			t.Fatalf("TryAcquireAny over %d keys, %q free: %v, %v", n, keys[free], h, err)
		}
		_, err = l.TryAcquireAny(ctx, keys, time.Minute)
		if !errors.Is(err, lock.ErrNotAcquired) || lock.RemainingTTL(err) <= 0 {
			t.Fatalf("TryAcquireAny with every key held: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
