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

// A slot of each of two pools in one round trip: each pool's keys share a
// hash tag, as a semaphore's slots do.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
func ExampleLock_TryAcquireAnyEach() {
	l, err := redislock.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}))
	if err != nil {
		log.Fatal(err)
	}
	reqs := []lock.AnyRequest{
		{Keys: []string{"gpu/{a100}/0", "gpu/{a100}/1"}, TTL: time.Minute},
		{Keys: []string{"gpu/{h100}/0"}, TTL: time.Minute},
	}
	for i, r := range l.TryAcquireAnyEach(context.Background(), reqs) {
		if r.Err != nil {
			fmt.Println("request", i, r.Err)
			continue
		}
		fmt.Println("request", i, "holds", r.Handle.Key())
	}
}
