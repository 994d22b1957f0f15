package backend_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/lock"
)

func ExampleOpen() {
	// "redis://127.0.0.1:6379", "postgres://...", "etcd://h1:2379,h2:2379" work the same way.
	l, closeFn, err := backend.Open(context.Background(), "mem://demo", lock.WithOwner("cli"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeFn()
	h, err := l.TryAcquire(context.Background(), "k", time.Minute)
	fmt.Println(h.Token(), err)
	// Output: 1 <nil>
}
