package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Many grants released in one pass under the Lock's mutex.
func ExampleLock_ReleaseEach() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var hs []lock.Handle
	for _, key := range []string{"a", "b"} {
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		hs = append(hs, h)
	}
	_, _ = l.ForceRelease(ctx, "b")
	errs := l.ReleaseEach(ctx, hs)
	fmt.Println(errs[0], errors.Is(errs[1], lock.ErrLost))
	// Output: <nil> true
}
