package backend_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/lock"
)

func ExampleOpen() {
	// "redis://127.0.0.1:6379", "postgres://...", "etcd://h1:2379,h2:2379" work the same way.
	l, closeFn, err := backend.Open(context.Background(), "mem://demo", backend.WithCommon(lock.Common{Owner: "cli"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeFn()
	h, err := l.TryAcquire(context.Background(), "k", time.Minute)
	fmt.Println(h.Token(), err)
	// Output: 1 <nil>
}

// The URL forms of the network backends. A real server is needed, so this
// example is compiled, not run. Credentials come from the environment, not
// from code.
func ExampleOpen_urls() {
	ctx := context.Background()
	for _, u := range []string{
		"redis://:" + os.Getenv("REDIS_PASSWORD") + "@127.0.0.1:6379/0",
		"redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000",
		"postgres://app:" + os.Getenv("PGPASSWORD") + "@db.internal:5432/app?sslmode=verify-full",
		"etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379",
	} {
		l, closeFn, err := backend.Open(ctx, u, backend.WithCommon(lock.Common{Owner: "worker-7"}))
		if err != nil {
			log.Fatal(err) // Open's errors do not show the password
		}
		err = lock.Do(ctx, l, "reports/daily", func(ctx context.Context) error { return nil })
		if err != nil {
			log.Print(backend.Redact(u), ": ", err)
		}
		if err := closeFn(); err != nil {
			log.Print(err)
		}
	}
}

// A URL, safe to log.
func ExampleRedact() {
	fmt.Println(backend.Redact("redis://:s3cret@cache.internal:6379/0"))
	fmt.Println(backend.Redact("postgres://app:s3cret@db.internal/app?sslmode=require"))
	fmt.Println(backend.Redact("host=db.internal password=s3cret"))
	// Output:
	// redis://:xxxxx@cache.internal:6379/0
	// postgres://app:xxxxx@db.internal/app?sslmode=require
	// (a connection string without a scheme, not shown)
}

// An error that may quote the URL, safe to log.
func ExampleRedactError() {
	u := "postgres://app:s3cret@db.internal/app"
	err := fmt.Errorf("connect to %s: %w", u, context.DeadlineExceeded)
	safe := backend.RedactError(err, u)
	fmt.Println(strings.Contains(safe.Error(), "s3cret"), errors.Is(safe, context.DeadlineExceeded))
	// Output: false true
}

// A program that keeps more than locks on its Redis (a jobs registry, a
// queue) makes its client from the same URL as its Lock.
func ExampleRedisClient() {
	c, err := backend.RedisClient("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster?db=1")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Printf("%T\n", c)
	// Output: *redis.Client
}
