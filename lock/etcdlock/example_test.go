package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

func ExampleNew() {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := etcdlock.New(client, etcdlock.WithPrefix("myapp/locks/"), etcdlock.WithCommon(lock.Common{Owner: "worker-7"}))
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

func ExampleWithMinTTL() {
	// A cluster run with --election-timeout=100 accepts 1 s leases.
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	l, err := etcdlock.New(client, etcdlock.WithMinTTL(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := l.TryAcquire(ctx, "short", 300*time.Millisecond) // a 1 s lease
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("valid for", time.Until(h.ValidUntil()).Round(100*time.Millisecond)) // the 300 ms asked for, less the drift
	_ = h.Release(ctx)
}

func ExampleLock_TryAcquireAny() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	l, _ := etcdlock.New(client)
	defer l.Close()
	// One Txn tries the slots, from a random one, and takes the first free.
	h, err := l.TryAcquireAny(context.Background(), []string{"gpu/0", "gpu/1", "gpu/2"}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("got", h.Key(), "token", h.Token())
}

func ExampleLock_List() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	l, _ := etcdlock.New(client)
	defer l.Close()
	grants, err := l.List(context.Background(), "reports/")
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range grants {
		fmt.Printf("%s held by %s, token %d, %v left\n", g.Key, g.Owner, g.Token, g.Remaining)
	}
}

func ExampleLock_ForceRelease() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	l, _ := etcdlock.New(client)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	removed, err := l.ForceRelease(ctx, "jobs/stuck")
	fmt.Println(removed, err)
}

// etcd grants leases of whole seconds and of at least the cluster's
// minimum; the Lock reports the smallest ttl it grants.
func ExampleLock_MinTTL() {
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
	fmt.Println("shortest lease:", l.MinTTL())
}

// Who holds a key, with its token and remaining ttl.
func ExampleLock_Inspect() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := etcdlock.New(client, etcdlock.WithPrefix("myapp/locks/"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, held, err := l.Inspect(ctx, "reports/daily")
	switch {
	case err != nil:
		log.Fatal(err) // lock.ErrUnavailable: no quorum answered in time
	case !held:
		fmt.Println("free")
	default:
		fmt.Printf("held by %s, token %d, %v left\n", g.Owner, g.Token, g.Remaining)
	}
}

// Many readers hold a key at once; a writer waiting for it stops new
// readers, so it is not starved.
func ExampleLock_TryAcquireShared() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := etcdlock.New(client, etcdlock.WithPrefix("myapp/locks/"), etcdlock.WithCommon(lock.Common{Owner: "reader-3"}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	// A reader: waits while a writer holds the config or waits for it.
	err = lock.DoShared(ctx, l, "config/routes", func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		fmt.Println("reading the routes under token", token)
		return nil
	}, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// The writer: lock.Do's exclusive grant excludes every reader.
	err = lock.Do(ctx, l, "config/routes", func(ctx context.Context) error {
		fmt.Println("reloading the routes")
		return nil
	}, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// Lock an order and its customer together, or neither: one Txn.
func ExampleLock_TryAcquireAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	l, err := etcdlock.New(client, etcdlock.WithPrefix("myapp/locks/"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	keys := []string{"orders/42", "customers/7"} // at most etcdlock.MaxGroupKeys
	g, err := l.TryAcquireAll(ctx, keys, time.Minute)
	var na *lock.NotAcquiredError
	switch {
	case errors.As(err, &na):
		fmt.Printf("%s is held; all may be free in %v\n", na.Key, na.Remaining)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer g.Release(ctx)
	fmt.Println("holding", g.Keys(), "tokens", g.Tokens())
}

// Hold the partitions of a stream in one batch: their grants share a few
// leases (etcdlock.BatchLeaseGrants grants per lease) and one Renew keeps
// them all, a keepalive and a read per lease. (lock.Keeper does the
// renewing for you, every ttl/3.)
func ExampleLock_NewBatch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
	b, err := l.NewBatch(ctx, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx) // revokes the leases: every grant still held ends
	var held []lock.Handle
	for p := range 64 {
		h, err := b.TryAcquire(ctx, fmt.Sprintf("stream/orders/partition/%d", p))
		if err == nil {
			held = append(held, h)
		}
	}
	for i, err := range b.Renew(ctx, held) {
		switch {
		case errors.Is(err, lock.ErrLost):
			fmt.Println("lost", held[i].Key()) // that partition alone
		case err != nil:
			fmt.Println("unknown until", held[i].ValidUntil(), err)
		}
	}
}

// Claim the ticks of every timer due at one instant: one Txn per
// etcdlock.MaxClaimsPerTxn claims. Each claim lapses after its ttl.
func ExampleLock_ClaimEach() {
	client, _ := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	l, _ := etcdlock.New(client)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	due := time.Now().Truncate(time.Minute).Unix()
	reqs := []lock.ClaimRequest{
		{Key: fmt.Sprintf("timers/report/%d", due), TTL: time.Minute},
		{Key: fmt.Sprintf("timers/cleanup/%d", due), TTL: time.Minute},
	}
	for i, r := range lock.ClaimEach(ctx, l, reqs) {
		switch {
		case r.Err == nil:
			fmt.Println("run", reqs[i].Key, "under token", r.Token)
		case errors.Is(r.Err, lock.ErrNotAcquired):
			// another scheduler claimed this tick
		default:
			log.Print(r.Err)
		}
	}
}
