package memlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func ExampleNew() {
	l := memlock.New(lock.WithOwner("worker-1"))
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
	table := memlock.New(lock.WithOwner("host-a"))
	hostB := table.Share(lock.WithOwner("host-b")) // same grants, another owner
	ctx := context.Background()
	h, _ := table.TryAcquire(ctx, "k", time.Minute)
	_, err := hostB.TryAcquire(ctx, "k", time.Minute)
	fmt.Println(err != nil)
	_ = h.Release(ctx)
	hb, err := hostB.TryAcquire(ctx, "k", time.Minute)
	fmt.Println(err, hb.Token())
	// Output:
	// true
	// <nil> 2
}

func ExampleLock_List() {
	l := memlock.New(lock.WithOwner("host-a"))
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
	l := memlock.New(lock.WithOwner("host-a"))
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "k", time.Minute)
	g, held, _ := l.Inspect(ctx, "k")
	fmt.Println(held, g.Owner, g.Token)
	// Output: true host-a 1
}

func ExampleLock_ForceRelease() {
	l := memlock.New()
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
	l := memlock.New()
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "k", time.Hour)
	sub, _ := l.Subscribe(ctx, "k") // subscribe first, then try
	defer sub.Close()
	go func() { _ = h.Release(ctx) }()
	fmt.Println(sub.Wait(ctx, time.Minute)) // woken by the release
	// Output: <nil>
}

func ExampleLock_TryAcquireAny() {
	l := memlock.New()
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "slot/0", time.Minute)
	h, _ := l.TryAcquireAny(ctx, []string{"slot/0", "slot/1"}, time.Minute)
	fmt.Println(h.Key())
	// Output: slot/1
}
