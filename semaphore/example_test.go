package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

func ExampleNew() {
	l, err := memlock.New() // any lock.Lock shared by the processes
	if err != nil {
		log.Fatal(err)
	}
	gpus, err := semaphore.New(l, "gpu-pool", 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(gpus.Name(), gpus.Size())
	// Output: gpu-pool 2
}

func ExampleSemaphore_TryAcquire() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "api-quota", 1)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, _ := sem.TryAcquire(ctx, time.Minute)
	fmt.Println("slot", p.Slot())
	_, err = sem.TryAcquire(ctx, time.Minute)
	fmt.Println(err != nil) // all slots busy: lock.ErrNotAcquired
	_ = p.Release(ctx)
	// Output:
	// slot 0
	// true
}

func ExampleSemaphore_Acquire() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "exports", 3)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := sem.Acquire(ctx, 30*time.Second) // waits for a free slot, then keeps it
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx) // stops the renewal and gives the slot back
	// The work runs under the lease's context: it ends if the slot is lost.
	work := lease.Context()
	token, _ := lock.TokenFrom(work)
	fmt.Println("exporting under token", token)
	// Output: exporting under token 2
}

// A permit from AcquirePermit (or TryAcquire) lapses after its ttl unless
// it is kept: lock.Keep renews it until the lease's Release.
func ExampleSemaphore_AcquirePermit() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "exports", 1)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, err := sem.AcquirePermit(ctx, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	lease, err := lock.Keep(ctx, p, 30*time.Second)
	if err != nil {
		_ = p.Release(ctx)
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("slot", p.Slot(), "kept until Release")
	// Output: slot 0 kept until Release
}

// Work longer than the ttl keeps its slot: the lease renews it. The ttl
// only bounds how long the slot stays taken if this process dies.
func ExampleLease() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "reports", 1)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := sem.Acquire(ctx, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the work: twice the ttl
	_, err = sem.TryAcquire(ctx, time.Minute)
	fmt.Println("slot", lease.Slot(), "still held:", errors.Is(err, lock.ErrNotAcquired))
	fmt.Println("release:", lease.Release(ctx))
	// Output:
	// slot 0 still held: true
	// release: <nil>
}

func ExampleSemaphore_Do() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "fragile-downstream", 2, semaphore.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	err = sem.Do(context.Background(), func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		fmt.Println("calling the downstream under token", token)
		return nil
	})
	fmt.Println(err)
	// Output:
	// calling the downstream under token 2
	// <nil>
}

func ExampleSemaphore_Occupancy() {
	ctx := context.Background()
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "workers", 3)
	if err != nil {
		log.Fatal(err)
	}
	// host-a takes every slot, then gives slot 1 back.
	permits := make([]*semaphore.Permit, 3)
	for range 3 {
		p, _ := sem.TryAcquire(ctx, time.Minute)
		permits[p.Slot()] = p
	}
	_ = permits[1].Release(ctx)
	defer permits[0].Release(ctx)
	defer permits[2].Release(ctx)
	slots, _ := sem.Occupancy(ctx)
	for _, s := range slots {
		if s.Held {
			fmt.Println("slot", s.Slot, "held by", s.Grant.Owner)
		} else {
			fmt.Println("slot", s.Slot, "free")
		}
	}
	// Output:
	// slot 0 held by host-a
	// slot 1 free
	// slot 2 held by host-a
}

func ExampleObserve() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	sem, _ := semaphore.New(l, "db", 3)
	p, _ := sem.TryAcquire(ctx, time.Minute)
	defer p.Release(ctx)
	// A tool that only watches: it declares nothing and takes no slot.
	watcher, err := l.Share() // another host on the same backend
	if err != nil {
		log.Fatal(err)
	}
	o, _ := semaphore.Observe(ctx, watcher, "db")
	fmt.Println(o.Sizes, o.Size(), len(o.Held), o.Held[0].Grant.Owner)
	// Output: [3] 3 1 host-a
}

func ExampleObserveAll() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"db", "api"} {
		sem, _ := semaphore.New(l, name, 2)
		p, _ := sem.TryAcquire(ctx, time.Minute)
		defer p.Release(ctx)
	}
	all, _ := semaphore.ObserveAll(ctx, l, "")
	for _, o := range all {
		fmt.Println(o.Name, len(o.Held), "of", o.Size())
	}
	// Output:
	// api 1 of 2
	// db 1 of 2
}

func ExampleObservation_Slots() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, semaphore.SlotKey("db", 1), time.Minute)
	o, _ := semaphore.Observe(ctx, l, "db")
	for _, s := range o.Slots(3) {
		fmt.Println(s.Slot, s.Held)
	}
	// Output:
	// 0 false
	// 1 true
	// 2 false
}

// A long job holds a permit with lock.Hold: renewed while it runs, given
// back when it returns, and its context ends if the slot is lost.
func ExamplePermit() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "video-transcode", 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sem.AcquirePermit(ctx, 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = lock.Hold(ctx, p, 30*time.Second, func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		// p.Slot() is one of 0..3, whichever was free (tried from a random one).
		fmt.Println("transcoding under token", token)
		return nil
	})
	fmt.Println(err)
	// Output:
	// transcoding under token 2
	// <nil>
}

func ExamplePermit_Release() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "exports", 1)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	p, _ := sem.TryAcquire(ctx, time.Minute)
	fmt.Println(p.Release(ctx))
	fmt.Println(errors.Is(p.Release(ctx), lock.ErrLost)) // released already
	_, err = sem.TryAcquire(ctx, time.Minute)
	fmt.Println(err) // the slot is free again
	// Output:
	// <nil>
	// true
	// <nil>
}

// The key of a slot, to find it with an Inspector or the CLI.
func ExampleSlotKey() {
	fmt.Println(semaphore.SlotKey("gpu-pool", 0))
	// Output: sem/{gpu-pool}/slot/0
}

// A process holding many permits keeps them through one lock.Keeper.
func ExampleWithKeeper() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	k, err := lock.NewKeeper(l, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(context.Background())
	conns, err := semaphore.New(l, "db-connections", 100, semaphore.WithKeeper(k))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if _, err := conns.Acquire(context.Background(), 30*time.Second); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("permits kept by the Keeper:", k.Len())
	// Output: permits kept by the Keeper: 3
}

func ExampleWithoutSizeCheck() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Many semaphores: none declares or checks its size on its own...
	var sems []*semaphore.Semaphore
	for _, name := range []string{"tenant/a", "tenant/b", "tenant/c"} {
		sem, err := semaphore.New(l, name, 2, semaphore.WithoutSizeCheck())
		if err != nil {
			log.Fatal(err)
		}
		sems = append(sems, sem)
	}
	// ...the caller checks them all at once (and again every 30 s).
	fmt.Println(semaphore.CheckSizes(ctx, l, "tenant/", sems))
	p, err := sems[0].TryAcquire(ctx, time.Minute)
	fmt.Println(err)
	_ = p.Release(ctx)
	// Output:
	// [<nil> <nil> <nil>]
	// <nil>
}

func ExampleCheckSizes() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Another process uses "jobs/b" with 3 slots.
	other, _ := semaphore.New(l, "jobs/b", 3)
	p, _ := other.TryAcquire(ctx, time.Minute)
	defer p.Release(ctx)

	a, _ := semaphore.New(l, "jobs/a", 2, semaphore.WithoutSizeCheck())
	b, _ := semaphore.New(l, "jobs/b", 2, semaphore.WithoutSizeCheck())
	for i, err := range semaphore.CheckSizes(ctx, l, "jobs/", []*semaphore.Semaphore{a, b}) {
		fmt.Println(i, errors.Is(err, semaphore.ErrSizeMismatch))
	}
	// Output:
	// 0 false
	// 1 true
}

// Permits released together: lock.ReleaseEach releases the slots' grants
// in one call and tells each permit (AfterRelease).
func ExamplePermit_AfterRelease() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "uploads", 2)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var hs []lock.Handle
	for range 2 {
		p, err := sem.TryAcquire(ctx, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		hs = append(hs, p)
	}
	fmt.Println(lock.ReleaseEach(ctx, l, hs))
	_, err = sem.TryAcquire(ctx, time.Minute)
	fmt.Println(err) // the slots are free again
	// Output:
	// [<nil> <nil>]
	// <nil>
}
