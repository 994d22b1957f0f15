package lock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold-go/leasehold/internal/testkit"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// FuzzHelpers feeds keys, ttls, names and sizes to the lock helpers and a
// semaphore on memlock: no input panics or hangs, valid input is granted
// (memlock starts empty), and every refused input gives an error matching
// lock.ErrInvalidArgument. Plain `go test` runs the seeds; CI runs them
// too.
func FuzzHelpers(f *testing.F) {
	f.Add("k", int64(time.Second), "sem", uint16(3))
	f.Add("", int64(0), "", uint16(0))
	f.Add(strings.Repeat("k", lock.MaxKeyLen+1), int64(-1), "a{b}", uint16(semaphore.MaxSize+1))
	f.Add(strings.Repeat("k", lock.MaxKeyLen), int64(lock.MaxTTL), strings.Repeat("n", lock.MaxNameLen), uint16(semaphore.MaxSize))
	f.Add("k", int64(math.MaxInt64), "a\x00b", uint16(1))
	f.Add("k", int64(lock.MaxTTL)+1, strings.Repeat("n", lock.MaxNameLen+1), uint16(2))
	f.Add("\x02k\x00w", int64(1), "\xff", uint16(7))
	f.Add("k", int64(2), "ok", uint16(1))
	f.Add("{tag}k", int64(time.Hour), "é", uint16(64))
	f.Fuzz(func(t *testing.T, key string, ttlNs int64, name string, size uint16) {
		// A hang is a crash, with the input that caused it.
		hung := time.AfterFunc(10*time.Second, func() {
			panic(fmt.Sprintf("no answer within 10 s for key %.40q ttl %d name %.40q size %d", key, ttlNs, name, size))
		})
		defer hung.Stop()
		fuzzHelpers(t, key, time.Duration(ttlNs), name, int(size))
	})
}

func fuzzHelpers(t *testing.T, key string, ttl time.Duration, name string, size int) {
	ctx := context.Background()
	common := lock.Common{Logger: slog.New(slog.DiscardHandler)}
	quiet := lock.WithCommon(common)
	l := testkit.Must(memlock.New())
	keyOK := lock.CheckKey(key) == nil
	ttlOK := lock.DefaultLimits.CheckTTL(ttl) == nil
	// Do and Keep renew every ttl/3, at least lock.MinRenewInterval apart.
	keepOK := ttlOK && ttl/3 >= lock.MinRenewInterval
	// check: valid input succeeds, refused input is ErrInvalidArgument.
	check := func(what string, valid bool, err error) {
		t.Helper()
		switch {
		case valid && err != nil:
			t.Fatalf("%s(key %.40q, ttl %v): %v for valid input", what, key, ttl, err)
		case !valid && !errors.Is(err, lock.ErrInvalidArgument):
			t.Fatalf("%s(key %.40q, ttl %v): %v, want an error matching ErrInvalidArgument", what, key, ttl, err)
		}
	}
	release := func(h lock.Handle) {
		if h != nil {
			_ = h.Release(ctx)
		}
	}

	h, err := l.TryAcquire(ctx, key, ttl)
	check("TryAcquire", keyOK && ttlOK, err)
	release(h)

	actx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	h, err = lock.Acquire(actx, l, key, ttl)
	cancel()
	check("Acquire", keyOK && ttlOK, err)
	release(h)

	_, err = lock.Claim(ctx, l, key+"/claim", ttl)
	check("Claim", lock.CheckKey(key+"/claim") == nil && ttlOK, err)

	keys := make([]string, size%6)
	for i := range keys {
		keys[i] = key
	}
	h, err = l.TryAcquireAny(ctx, keys, ttl)
	check("TryAcquireAny", len(keys) > 0 && keyOK && ttlOK, err)
	release(h)

	err = lock.Do(ctx, l, key, func(context.Context) error { return nil }, lock.WithTTL(ttl), quiet)
	if !errors.Is(err, lock.ErrLost) { // a ttl of nanoseconds may lapse during fn
		check("Do", keyOK && keepOK, err)
	}

	if held, err := l.TryAcquire(ctx, "keep", time.Minute); err == nil {
		lease, err := lock.Keep(ctx, held, ttl, quiet)
		check("Keep", keepOK, err)
		if lease != nil {
			_ = lease.Release(ctx)
		} else {
			release(held)
		}
	}

	sem, err := semaphore.New(l, name, size, semaphore.WithCommon(common))
	nameOK := backendkit.CheckName("semaphore name", name) == nil
	check("semaphore.New", nameOK && size >= 1 && size <= semaphore.MaxSize, err)
	if sem != nil {
		p, err := sem.TryAcquire(ctx, ttl)
		check("Semaphore.TryAcquire", ttlOK, err)
		if p != nil {
			_ = p.Release(ctx)
		}
	}
}
