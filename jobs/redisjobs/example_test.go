package redisjobs_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// Compile-only (no Output): it needs a Redis server, with persistence for
// the registry to survive a restart.
func ExampleNew() {
	c := redis.NewClient(&redis.Options{Addr: "redis.internal:6379"})
	defer c.Close()
	reg, err := redisjobs.New(c, "billing") // keys under {billing}:
	if err != nil {
		log.Fatal(err)
	}
	l, err := redislock.New(c) // elects the recoverer on the same server
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		// Put j back on the queue (e.g. a list) to run after delay.
		return c.LPush(ctx, "billing:queue", j.ID).Err()
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = r.Run(context.Background()) }()
}
