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

func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client, redislock.WithPrefix("myapp:locks:"), lock.WithOwner("worker-7"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	err = lock.Do(context.Background(), l, "reports/daily", func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		fmt.Println("generating the report under token", token)
		return nil
	}, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}})
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	// Keys that share a hash tag live in one slot: one script can try them all.
	h, err := l.TryAcquireAny(context.Background(), []string{"gpu/{pool}/0", "gpu/{pool}/1"}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("got", h.Key())
}

func ExampleLock_List() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	l, _ := redislock.New(client)
	grants, err := l.List(context.Background(), "reports/")
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range grants {
		fmt.Printf("%s held by %s, token %d, %v left\n", g.Key, g.Owner, g.Token, g.Remaining)
	}
}

func ExampleLock_ForceRelease() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	l, _ := redislock.New(client)
	removed, err := l.ForceRelease(context.Background(), "jobs/stuck")
	fmt.Println(removed, err)
}
