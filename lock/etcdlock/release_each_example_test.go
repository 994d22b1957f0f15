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

// Many grants released in a Txn per 128: compile-only (it needs an etcd
// server).
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
	var hs []lock.Handle
	for i := range 300 {
		h, err := l.TryAcquire(ctx, fmt.Sprintf("shard/%d", i), time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		hs = append(hs, h)
	}
	for i, err := range lock.ReleaseEach(ctx, l, hs) { // three Txns
		if err != nil {
			fmt.Println(hs[i].Key(), err)
		}
	}
}
