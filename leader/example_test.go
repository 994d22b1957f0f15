package leader_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func ExampleRun() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"})) // any lock.Lock shared by the candidates
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = leader.Run(ctx, l, "recovery-scan", func(ctx context.Context) error {
		term, _ := lock.TokenFrom(ctx)
		fmt.Println("leading, term", term)
		// The singleton work runs here until ctx ends (leadership lost or
		// shutdown); this example shuts down at once.
		cancel()
		<-ctx.Done()
		return nil
	}, leader.WithTTL(15*time.Second), leader.WithRenewInterval(5*time.Second), leader.WithRetryInterval(2*time.Second))
	fmt.Println("Run returned", err)
	// Output:
	// leading, term 1
	// Run returned <nil>
}

func ExampleObserve() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	elected := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = leader.Run(ctx, l, "reports", func(ctx context.Context) error {
			close(elected)
			<-ctx.Done()
			return nil
		})
	}()
	<-elected
	observer, err := l.Share() // another host on the same backend
	if err != nil {
		log.Fatal(err)
	}
	t, ok, _ := leader.Observe(context.Background(), observer, "reports")
	fmt.Println(ok, t.Owner, t.Term)
	cancel()
	<-done
	// Output: true host-a 1
}

func ExampleOnElected() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-b"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_ = leader.Run(ctx, l, "compaction", func(ctx context.Context) error { cancel(); return nil },
		leader.OnElected(func(t leader.Term) { fmt.Println("elected:", t.Owner, "term", t.Term) }),
		leader.OnDemoted(func(t leader.Term, cause error) { fmt.Println("demoted: term", t.Term, "cause:", cause) }))
	// Output:
	// elected: host-b term 1
	// demoted: term 1 cause: context canceled
}

func ExampleObserveAll() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	elected := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = leader.Run(ctx, l, "billing/eu", func(ctx context.Context) error {
			close(elected)
			<-ctx.Done()
			return nil
		})
	}()
	<-elected
	observer, err := l.Share()
	if err != nil {
		log.Fatal(err)
	}
	all, _ := leader.ObserveAll(context.Background(), observer, "billing/")
	for _, o := range all {
		fmt.Println(o.Name, o.Owner, o.Term.Term)
	}
	cancel()
	<-done
	// Output: billing/eu host-a 1
}

// A leader-gated loop: only the leader runs the periodic work, each write
// is fenced with the term's token, and the loop stops as soon as the term
// ends (lost lease or shutdown). Every replica runs the same code.
func ExampleRun_loop() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "replica-1"})) // redislock, pglock, etcdlock in production
	if err != nil {
		log.Fatal(err)
	}
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	var store lock.Fence // stands for the database that checks tokens
	passes := 0
	err = leader.Run(ctx, l, "billing/sweeper", func(ctx context.Context) error {
		term, _ := lock.TokenFrom(ctx)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil // demoted or shutting down: stop writing at once
			case <-tick.C:
			}
			passes++
			if err := store.Do(term, func() { fmt.Println("sweep", passes, "under term", term) }); err != nil {
				return err // a newer leader wrote: this term is over
			}
			if passes == 3 {
				shutdown() // the example stops after three passes
			}
		}
	}, leader.WithTTL(15*time.Second))
	fmt.Println("Run returned", err)
	// Output:
	// sweep 1 under term 1
	// sweep 2 under term 1
	// sweep 3 under term 1
	// Run returned <nil>
}

// The timing of an election: a crashed leader is replaced within the ttl
// (15 s) plus a follower's retry (at most 2 s, less when the backend
// announces releases); a live leader renews every 5 s and steps down
// before its grant can run out when renewals fail.
func ExampleWithTTL() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = leader.Run(ctx, l, "compaction", func(ctx context.Context) error {
		cancel()
		return nil
	}, leader.WithTTL(15*time.Second), leader.WithRenewInterval(5*time.Second), leader.WithRetryInterval(2*time.Second))
	fmt.Println(err)
	// Bad timing is refused by Run.
	err = leader.Run(context.Background(), l, "compaction", func(ctx context.Context) error { return nil },
		leader.WithTTL(5*time.Second), leader.WithRenewInterval(5*time.Second))
	fmt.Println(errors.Is(err, lock.ErrInvalidArgument))
	// Output:
	// <nil>
	// true
}

// The lock key of an election, to look it up with an Inspector or the CLI.
func ExampleKey() {
	fmt.Println(leader.Key("billing/sweeper"))
	// Output: leader/billing/sweeper
}

// A hook for metrics or logs when this replica loses leadership, and why.
func ExampleOnDemoted() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "replica-2"}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = leader.Run(ctx, l, "reports", func(ctx context.Context) error {
		return errors.New("report store unreachable") // ends the term
	}, leader.OnDemoted(func(t leader.Term, cause error) {
		fmt.Println("demoted:", t.Owner, "term", t.Term, "cause:", cause)
		cancel() // the example stops here; Run would campaign again
	}), leader.WithCommon(lock.Common{Logger: slog.New(slog.DiscardHandler)}))
	// Output: demoted: replica-2 term 1 cause: report store unreachable
}

// One election per shard, all the terms kept by one lock.Keeper.
func ExampleWithKeeper() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	k, err := lock.NewKeeper(l, 15*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	elected := make(chan string)
	for _, shard := range []string{"shard-a", "shard-b"} {
		go func() {
			_ = leader.Run(ctx, l, shard, func(ctx context.Context) error {
				elected <- shard
				<-ctx.Done()
				return nil
			}, leader.WithKeeper(k))
		}()
	}
	<-elected
	<-elected
	fmt.Println("terms kept by the Keeper:", k.Len())
	cancel()
	// Output: terms kept by the Keeper: 2
}
