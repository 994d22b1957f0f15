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

// A slot of each of many semaphores, in one call.
func ExampleTryAcquireEach() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	a, err := semaphore.New(l, "reports", 2)
	if err != nil {
		log.Fatal(err)
	}
	b, err := semaphore.New(l, "exports", 1)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	reqs := []semaphore.SlotRequest{{Sem: a, TTL: time.Minute}, {Sem: b, TTL: time.Minute}}
	for _, r := range semaphore.TryAcquireEach(ctx, reqs) {
		fmt.Println(r.Err == nil)
	}
	// exports has one slot, held now: that request alone is refused.
	for _, r := range semaphore.TryAcquireEach(ctx, reqs) {
		fmt.Println(r.Err == nil, errors.Is(r.Err, lock.ErrNotAcquired))
	}
	// Output:
	// true
	// true
	// true false
	// false true
}

// A SlotRequest names the semaphore and the permit's ttl.
func ExampleSlotRequest() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "uploads", 4)
	if err != nil {
		log.Fatal(err)
	}
	res := semaphore.TryAcquireEach(context.Background(), []semaphore.SlotRequest{
		{Sem: sem, TTL: time.Minute},
		{Sem: sem, TTL: 0}, // a bad ttl: this request alone fails
	})
	fmt.Println(res[0].Err == nil, errors.Is(res[1].Err, lock.ErrInvalidTTL))
	// Output: true true
}

// A SlotResult's Permit is TryAcquire's: not renewed, released by the
// caller.
func ExampleSlotResult() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	sem, err := semaphore.New(l, "printers", 1)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r := semaphore.TryAcquireEach(ctx, []semaphore.SlotRequest{{Sem: sem, TTL: time.Minute}})[0]
	if r.Err != nil {
		log.Fatal(r.Err)
	}
	fmt.Println("slot", r.Permit.Slot(), r.Permit.Release(ctx))
	// Output: slot 0 <nil>
}
