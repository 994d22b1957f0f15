package etcdlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// Many grants released in a Txn per 128 deletes: compile-only (it needs
// an etcd server).
func ExampleLock_ReleaseEach() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := etcdlock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	hs := make([]lock.Handle, 0, 3)
	for _, shard := range []string{"shard/a", "shard/b", "shard/c"} {
		if h, err := l.TryAcquire(ctx, shard, time.Minute); err == nil {
			hs = append(hs, h)
		}
	}
	fmt.Println(lock.ReleaseEach(ctx, l, hs)) // one Txn of 3 deletes
}
