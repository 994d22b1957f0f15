package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// A Lock on one Redis server at 127.0.0.1:6379.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client, redislock.WithPrefix("myapp:locks:"), redislock.WithCommon(lock.Common{Owner: "worker-7"}))
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

// A Lock on Redis Cluster.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
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

// Every grant under a prefix, found with SCAN.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
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

// An operator removes a stuck grant.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
func ExampleLock_ForceRelease() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	l, _ := redislock.New(client)
	removed, err := l.ForceRelease(context.Background(), "jobs/stuck")
	fmt.Println(removed, err)
}

// Who holds a key, with which token and for how long.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
func ExampleLock_Inspect() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	g, held, err := l.Inspect(context.Background(), "reports/daily")
	switch {
	case err != nil:
		log.Fatal(err) // lock.ErrUnavailable: the server did not answer
	case !held:
		fmt.Println("reports/daily is free")
	default:
		fmt.Printf("held by %s since %v, token %d, %v left\n", g.Owner, g.Since, g.Token, g.Remaining)
	}
}

// Waiting for a release by hand; lock.Acquire does this for you. Subscribe
// first, then try: a release after Subscribe returns is never missed.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
func ExampleLock_Subscribe() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close() // ends the shared subscription
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := l.Subscribe(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for {
		h, err := l.TryAcquire(ctx, "reports/daily", 30*time.Second)
		if err == nil {
			defer h.Release(context.Background())
			fmt.Println("got it, token", h.Token())
			return
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			log.Fatal(err)
		}
		// Sleep until a release is published, or until the holder's ttl
		// has run out (a holder that crashed publishes nothing).
		if err := sub.Wait(ctx, lock.RemainingTTL(err)); err != nil {
			log.Fatal(err)
		}
	}
}

// Behind Redis Sentinel: the client follows failovers. The prefix keeps
// this application's keys apart from others' on the same server.
func ExampleWithPrefix() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
		Password:      os.Getenv("REDIS_PASSWORD"),
	})
	defer client.Close()
	l, err := redislock.New(client, redislock.WithPrefix("billing:locks:"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if _, err := lock.HealthCheck(context.Background(), l); err != nil {
		log.Fatal(err)
	}
}

// From a redis:// or rediss:// URL, as most deployments configure it.
func ExampleNew_url() {
	opts, err := redis.ParseURL("rediss://:" + os.Getenv("REDIS_PASSWORD") + "@cache.internal:6380/0")
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	h, err := lock.Acquire(context.Background(), l, "reports/daily", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(context.Background())
}

// Waiting in a queue kept in Redis: a release hands the key to the first
// waiter. lock.Acquire does this for you on redislock.
func ExampleLock_AcquireQueued() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := l.AcquireQueued(ctx, "migrations", 5*time.Minute)
	if err != nil {
		log.Fatal(err) // ctx ended (nothing is held) or the server is unavailable
	}
	defer h.Release(context.Background())
	if n, err := l.Waiting(ctx, "migrations"); err == nil {
		fmt.Println(n, "other instances wait behind this one")
	}
}

// A Lock on a primary found through its Sentinels, whose every grant,
// extension and handoff one replica has acknowledged before it is
// reported: a failover then keeps them.
func ExampleWithReplicaAcks() {
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",
		SentinelAddrs:         []string{"127.0.0.1:26379", "127.0.0.1:26380", "127.0.0.1:26381"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	l, err := redislock.New(client, redislock.WithReplicaAcks(1, 500*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	// l.TryAcquire(ctx, "orders/42", 10*time.Second): ErrUnavailable when
	// no replica acknowledged the grant within 500 ms.
}

// Reader-writer locking: many readers share the config at once; a writer
// (lock.Acquire, exclusive) waits for them to drain, and new readers wait
// for it. Like every example of this package it needs a Redis server, so
// it is compile-only (no Output line).
func ExampleLock_TryAcquireShared() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	h, err := l.TryAcquireShared(ctx, "config", 10*time.Second)
	if errors.Is(err, lock.ErrNotAcquired) {
		fmt.Println("a writer holds or wants the config; retry in", lock.RemainingTTL(err))
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(ctx)
	fmt.Println("reading the config under token", h.Token())
	// lock.DoShared(ctx, l, "config", fn) waits, keeps and releases for you.
}

// Locking an order and its customer together, all or none. On Redis
// Cluster the keys share a hash tag. Like every example of this package it
// needs a Redis server, so it is compile-only (no Output line).
func ExampleLock_TryAcquireAll() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	keys := []string{"order/{o42}", "customer/{o42}/7"}
	if len(keys) > redislock.MaxGroupKeys { // one script holds the group
		log.Fatal("too many keys for one all-of grant")
	}
	g, err := l.TryAcquireAll(ctx, keys, 10*time.Second)
	if errors.Is(err, lock.ErrNotAcquired) {
		fmt.Println("one of the keys is held:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer g.Release(ctx)
	fmt.Println("tokens", g.Tokens())
	// lock.DoAll(ctx, l, keys, fn) waits for the whole set without deadlock.
}

// Many grants kept alive together: a Keeper (lock.NewKeeper) does this for
// you; here a batch renews 3,000 partitions' grants in one round trip, in
// scripts of 1,000 keys. Like every example of this package it needs a
// Redis server, so it is compile-only (no Output line).
func ExampleLock_NewBatch() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	b, err := l.NewBatch(ctx, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
	var held []lock.Handle
	for p := range 3000 {
		h, err := b.TryAcquire(ctx, fmt.Sprintf("stream/partition/%d", p))
		if err != nil {
			continue // ErrNotAcquired: another consumer has it
		}
		held = append(held, h)
	}
	// Every 10 s (a third of the ttl):
	for i, err := range b.Renew(ctx, held) {
		switch {
		case errors.Is(err, lock.ErrLost):
			fmt.Println("lost", held[i].Key()) // that partition alone: stop working on it
		case err != nil:
			fmt.Println("unknown: held at most until", held[i].ValidUntil())
		}
	}
}

// The ticks of many timers due at one instant, claimed in one round trip.
// Like every example of this package it needs a Redis server, so it is
// compile-only (no Output line).
func ExampleLock_ClaimEach() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	l, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	reqs := []lock.ClaimRequest{
		{Key: "timer/invoices/2026-11-25T02:00", TTL: time.Minute},
		{Key: "timer/reminders/2026-11-25T02:00", TTL: time.Minute},
	}
	for i, r := range l.ClaimEach(context.Background(), reqs) {
		if r.Err == nil {
			fmt.Println("this instance runs", reqs[i].Key, "under token", r.Token)
		}
	}
}
