package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Which backends make the requests together, natively.
func ExampleAnyEachAcquirer() {
	var l lock.Lock
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	_, native := l.(lock.AnyEachAcquirer)
	fmt.Println("memlock:", native)
	// Output: memlock: true
}

// One free key of each of two pools, in one call.
func ExampleTryAcquireAnyEach() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	reqs := []lock.AnyRequest{
		{Keys: []string{"gpu/0", "gpu/1"}, TTL: time.Minute},
		{Keys: []string{"fpga/0"}, TTL: time.Minute},
	}
	for i, r := range lock.TryAcquireAnyEach(ctx, l, reqs) {
		fmt.Println(i, r.Err == nil)
	}
	// fpga/0 is held now: that request alone is refused.
	for i, r := range lock.TryAcquireAnyEach(ctx, l, reqs) {
		fmt.Println(i, r.Err == nil, errors.Is(r.Err, lock.ErrNotAcquired))
	}
	// Output:
	// 0 true
	// 1 true
	// 0 true false
	// 1 false true
}

// An AnyRequest names the keys to choose from and the ttl of the grant.
func ExampleAnyRequest() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	reqs := []lock.AnyRequest{
		{Keys: []string{"worker/a"}, TTL: time.Minute},
		{Keys: nil, TTL: time.Minute}, // no keys: this request alone fails
	}
	res := lock.TryAcquireAnyEach(context.Background(), l, reqs)
	fmt.Println(res[0].Err == nil, errors.Is(res[1].Err, lock.ErrInvalidKey))
	// Output: true true
}

// An AnyResult's Handle is an ordinary grant: extend it, release it, keep
// it.
func ExampleAnyResult() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r := lock.TryAcquireAnyEach(ctx, l, []lock.AnyRequest{{Keys: []string{"job/7"}, TTL: time.Minute}})[0]
	if r.Err != nil {
		log.Fatal(r.Err)
	}
	fmt.Println(r.Handle.Key(), r.Handle.Extend(ctx, time.Minute), r.Handle.Release(ctx))
	// Output: job/7 <nil> <nil>
}
