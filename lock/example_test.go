package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func ExampleDo() {
	l := memlock.New() // or redislock, pglock, etcdlock: the same contract
	var ledger lock.Fence
	err := lock.Do(context.Background(), l, "reports/daily", func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		return ledger.Do(token, func() { fmt.Println("writing the report under token", token) })
	}, lock.WithTTL(10*time.Second))
	fmt.Println("err:", err)
	// Output:
	// writing the report under token 1
	// err: <nil>
}

func ExampleAcquire() {
	l := memlock.New()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := lock.Acquire(ctx, l, "inventory", 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer h.Release(context.Background())
	fmt.Println("holding", h.Key(), "token", h.Token())
	// Output: holding inventory token 1
}

func ExampleKeep() {
	l := memlock.New()
	ctx := context.Background()
	h, err := l.TryAcquire(ctx, "compaction", 3*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := lock.Keep(ctx, h, 3*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Long work watches lease.Context(): it is cancelled with a cause
	// matching lock.ErrLost the moment the grant is in doubt.
	select {
	case <-lease.Context().Done():
		fmt.Println("lost:", context.Cause(lease.Context()))
	case <-time.After(10 * time.Millisecond):
		fmt.Println("work done, still the holder")
	}
	fmt.Println("release:", lease.Release(ctx))
	// Output:
	// work done, still the holder
	// release: <nil>
}

func ExampleLock_tryAcquire() {
	l := memlock.New()
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "k", time.Minute)
	_, err := l.Share().TryAcquire(ctx, "k", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	_ = h.Release(ctx)
	fmt.Println(errors.Is(h.Release(ctx), lock.ErrLost)) // a second Release
	// Output:
	// true
	// true
}

func ExampleFence() {
	var f lock.Fence
	fmt.Println(f.Do(7, func() { fmt.Println("write by grant 7") }))
	fmt.Println(f.Do(8, func() { fmt.Println("write by grant 8") }))
	err := f.Do(7, func() { fmt.Println("never printed") }) // grant 7 was paused past its ttl
	fmt.Println(errors.Is(err, lock.ErrStaleToken))
	// Output:
	// write by grant 7
	// <nil>
	// write by grant 8
	// <nil>
	// true
}

func ExampleTokenFrom() {
	l := memlock.New()
	_ = lock.Do(context.Background(), l, "report", func(ctx context.Context) error {
		token, ok := lock.TokenFrom(ctx) // pass it to the protected resource
		fmt.Println(token, ok)
		return nil
	})
	// Output: 1 true
}

func ExampleOwnerOf() {
	l := memlock.New(lock.WithOwner("worker-1"))
	fmt.Println(lock.OwnerOf(l, "configured"))
	hidden := struct{ lock.Lock }{l} // a wrapper that is not lock.Owned
	fmt.Println(lock.OwnerOf(hidden, "configured"))
	// Output:
	// worker-1
	// configured
}

func ExampleHealthCheck() {
	_, err := lock.HealthCheck(context.Background(), memlock.New())
	fmt.Println("healthy:", err == nil)
	// Output: healthy: true
}

func ExampleRemainingTTL() {
	l := memlock.New()
	_, _ = l.TryAcquire(context.Background(), "k", time.Minute)
	_, err := l.Share().TryAcquire(context.Background(), "k", time.Minute)
	fmt.Println(lock.RemainingTTL(err) > 59*time.Second)
	// Output: true
}

// Whoever claims a one-off key first does the work; the others see it
// taken. The claim is never released: it lapses after its ttl.
func ExampleClaim() {
	l := memlock.New()
	ctx := context.Background()
	for _, host := range []string{"host-a", "host-b"} {
		token, err := lock.Claim(ctx, l, "invoices/2026-11-22", time.Hour)
		switch {
		case errors.Is(err, lock.ErrNotAcquired):
			fmt.Println(host, "sees it claimed")
		case err != nil:
			fmt.Println(host, "error:", err)
		default:
			fmt.Println(host, "claimed it, token", token)
		}
	}
	// Output:
	// host-a claimed it, token 1
	// host-b sees it claimed
}

func ExampleHold() {
	l := memlock.New()
	ctx := context.Background()
	// A grant taken some other way (TryAcquire, a semaphore permit, an
	// election); Hold keeps it alive while fn runs, then releases it.
	h, err := l.TryAcquire(ctx, "leader", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	var log lock.Fence
	err = lock.Hold(ctx, h, 10*time.Second, func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		return log.Do(token, func() { fmt.Println("leading under token", token) })
	})
	fmt.Println("err:", err)
	_, err = l.Share().TryAcquire(ctx, "leader", time.Second)
	fmt.Println("released:", err == nil)
	// Output:
	// leading under token 1
	// err: <nil>
	// released: true
}
