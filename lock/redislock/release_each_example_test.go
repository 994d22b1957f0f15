package redislock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// Many grants released in one round trip: a script per 32 grants (per
// slot on a Cluster), all in one pipeline, each key handed to its queue's
// first waiter or its release announced, as Release does.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
func ExampleLock_ReleaseEach() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var hs []lock.Handle
	for i := range 1000 {
		h, err := l.TryAcquire(ctx, fmt.Sprintf("partition/%d", i), time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		hs = append(hs, h)
	}
	for i, err := range lock.ReleaseEach(ctx, l, hs) { // or l.ReleaseEach
		if err != nil {
			fmt.Println(hs[i].Key(), err) // lock.ErrLost: it was gone already
		}
	}
}
