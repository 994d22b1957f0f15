package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func ExampleNew() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "worker-1"}))
	if err != nil {
		log.Fatal(err)
	}
	h, err := l.TryAcquire(context.Background(), "jobs/reindex", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Release(context.Background())
	fmt.Println(h.Key(), h.Token())
	// Output: jobs/reindex 1
}

func ExampleLock_Share() {
	table, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	hostB, err := table.Share(memlock.WithCommon(lock.Common{Owner: "host-b"})) // same grants, another owner
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := table.TryAcquire(ctx, "k", time.Minute)
	_, err = hostB.TryAcquire(ctx, "k", time.Minute)
	fmt.Println(err != nil)
	_ = h.Release(ctx)
	hb, err := hostB.TryAcquire(ctx, "k", time.Minute)
	fmt.Println(err, hb.Token())
	// Output:
	// true
	// <nil> 2
}

func ExampleLock_List() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "reports/daily", time.Minute)
	_, _ = l.TryAcquire(ctx, "reports/weekly", time.Minute)
	grants, _ := l.List(ctx, "reports/")
	for _, g := range grants {
		fmt.Println(g.Key, g.Owner, g.Token)
	}
	// Output:
	// reports/daily host-a 1
	// reports/weekly host-a 2
}

func ExampleLock_Inspect() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "k", time.Minute)
	g, held, _ := l.Inspect(ctx, "k")
	fmt.Println(held, g.Owner, g.Token)
	// Output: true host-a 1
}

func ExampleLock_ForceRelease() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "stuck", time.Hour)
	removed, _ := l.ForceRelease(ctx, "stuck")
	fmt.Println(removed)
	<-h.(lock.LossNotifier).Lost() // the holder learns of it
	fmt.Println(h.Release(ctx) != nil)
	// Output:
	// true
	// true
}

func ExampleLock_Subscribe() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "k", time.Hour)
	sub, _ := l.Subscribe(ctx, "k") // subscribe first, then try
	defer sub.Close()
	go func() { _ = h.Release(ctx) }()
	fmt.Println(sub.Wait(ctx, time.Minute)) // woken by the release
	// Output: <nil>
}

func ExampleLock_TryAcquireAny() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "slot/0", time.Minute)
	h, _ := l.TryAcquireAny(ctx, []string{"slot/0", "slot/1"}, time.Minute)
	fmt.Println(h.Key())
	// Output: slot/1
}

// The owner identity stored with every grant: WithOwner, or a fresh
// "hostname/pid/random" per instance.
func ExampleLock_Owner() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "worker-1"}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Owner())
	l2, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	l3, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	a, b := l2, l3
	fmt.Println(a.Owner() != b.Owner())
	// Output:
	// worker-1
	// true
}

// memlock accepts any positive ttl up to lock.MaxTTL.
func ExampleLock_Limits() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	lim := l.Limits()
	fmt.Println(lim.MinTTL, lim.MaxTTL == lock.MaxTTL, lim.MaxKeys == lock.MaxKeys)
	// Output: 0s true true
}

// TryAcquire never waits: it reports ErrNotAcquired with the holder's
// remaining ttl (lock.Acquire waits for you).
func ExampleLock_TryAcquire() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, err := l.TryAcquire(ctx, "reports/daily", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Release(ctx)
	other, err := l.Share() // a second instance over the same grants: another host
	if err != nil {
		log.Fatal(err)
	}
	_, err = other.TryAcquire(ctx, "reports/daily", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired), lock.RemainingTTL(err) > 0)
	// Output: true true
}

// AcquireQueued waits in the key's queue: a release hands the key to the
// longest waiter at once, with no caller able to take it in between.
func ExampleLock_AcquireQueued() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "reports/daily", time.Minute)
	got := make(chan lock.Handle)
	go func() {
		w, err := l.AcquireQueued(ctx, "reports/daily", time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		got <- w
	}()
	for n := 0; n == 0; n, _ = l.Waiting(ctx, "reports/daily") {
		runtime.Gosched() // until the waiter is queued
	}
	_ = h.Release(ctx)
	w := <-got
	fmt.Println(w.Key(), w.Token())
	// Output: reports/daily 2
}

// A claim is a grant nobody releases: it lapses after its ttl. Timers
// claim each tick this way.
func ExampleLock_Claim() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	token, err := l.Claim(ctx, "tick/2026-11-24T12:00", time.Minute)
	fmt.Println(token, err)
	_, err = l.Claim(ctx, "tick/2026-11-24T12:00", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	// Output:
	// 1 <nil>
	// true
}

func ExampleLock_TryAcquireShared() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r1, _ := l.TryAcquireShared(ctx, "schema", time.Minute)
	r2, _ := l.TryAcquireShared(ctx, "schema", 2*time.Minute)
	grants, _ := l.List(ctx, "schema")
	for _, g := range grants {
		fmt.Println(g.Key, g.Token, g.Shared)
	}
	first, _, _ := l.Inspect(ctx, "schema")
	fmt.Println("expires first:", first.Token)
	// A refused writer holds new readers off for lock.IntentTTL.
	_, err = l.TryAcquire(ctx, "schema", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	_, err = l.TryAcquireShared(ctx, "schema", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := l.TryAcquire(ctx, "schema", time.Minute)
	fmt.Println(err, w.Token())
	// Output:
	// schema 1 true
	// schema 2 true
	// expires first: 1
	// true
	// true
	// <nil> 3
}

func ExampleLock_TryAcquireAll() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "customers/7", 30*time.Second)
	_, err = l.TryAcquireAll(ctx, []string{"orders/42", "customers/7"}, time.Minute)
	var na *lock.NotAcquiredError
	fmt.Println(errors.As(err, &na), na.Key, na.Remaining.Round(time.Second))
	_ = h.Release(ctx)
	g, err := l.TryAcquireAll(ctx, []string{"orders/42", "customers/7"}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.Keys(), g.Tokens())
	grants, _ := l.List(ctx, "")
	fmt.Println(len(grants), grants[0].Group == grants[1].Group)
	fmt.Println(g.Release(ctx), g.Release(ctx) != nil)
	// Output:
	// true customers/7 30s
	// [orders/42 customers/7] [2 3]
	// 2 true
	// <nil> true
}
