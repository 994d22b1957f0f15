package leader_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func ExampleRun() {
	l := memlock.New(lock.WithOwner("host-a")) // any lock.Lock shared by the candidates
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := leader.Run(ctx, l, "recovery-scan", func(ctx context.Context) error {
		term, _ := lock.TokenFrom(ctx)
		fmt.Println("leading, term", term)
		// The singleton work runs here until ctx ends (leadership lost or
		// shutdown); this example shuts down at once.
		cancel()
		<-ctx.Done()
		return nil
	}, leader.WithLease(15*time.Second), leader.WithRenewEvery(5*time.Second), leader.WithRetry(2*time.Second))
	fmt.Println("Run returned", err)
	// Output:
	// leading, term 1
	// Run returned <nil>
}

func ExampleObserve() {
	l := memlock.New(lock.WithOwner("host-a"))
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
	t, ok, _ := leader.Observe(context.Background(), l.Share(), "reports")
	fmt.Println(ok, t.Identity, t.Term)
	cancel()
	<-done
	// Output: true host-a 1
}

func ExampleOnElected() {
	l := memlock.New(lock.WithOwner("host-b"))
	ctx, cancel := context.WithCancel(context.Background())
	_ = leader.Run(ctx, l, "compaction", func(ctx context.Context) error { cancel(); return nil },
		leader.OnElected(func(t leader.Term) { fmt.Println("elected:", t.Identity, "term", t.Term) }),
		leader.OnDemoted(func(t leader.Term, cause error) { fmt.Println("demoted: term", t.Term, "cause:", cause) }))
	// Output:
	// elected: host-b term 1
	// demoted: term 1 cause: context canceled
}

func ExampleObserveAll() {
	l := memlock.New(lock.WithOwner("host-a"))
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
	all, _ := leader.ObserveAll(context.Background(), l.Share(), "billing/")
	for _, o := range all {
		fmt.Println(o.Name, o.Identity, o.Term.Term)
	}
	cancel()
	<-done
	// Output: billing/eu host-a 1
}
