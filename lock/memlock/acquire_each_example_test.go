package memlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Requests for the same one key: the first is granted, the second finds
// it held, in one pass.
func ExampleLock_TryAcquireAnyEach() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	req := lock.AnyRequest{Keys: []string{"printer/0"}, TTL: time.Minute}
	for i, r := range l.TryAcquireAnyEach(context.Background(), []lock.AnyRequest{req, req}) {
		fmt.Println(i, r.Err == nil)
	}
	// Output:
	// 0 true
	// 1 false
}
