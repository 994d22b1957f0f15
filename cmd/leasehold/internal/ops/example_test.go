package ops_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/jobs"
)

func ExampleOpen() {
	ctx := context.Background()
	src, err := ops.Open(ctx, ops.Config{Backend: "mem://ops-example"})
	if err != nil {
		panic(err)
	}
	defer src.Close()
	_, _ = src.Lock.TryAcquire(ctx, "orders/42", time.Minute)
	grants, _ := src.Locks(ctx, "orders/")
	fmt.Println(len(grants), grants[0].Key)
	// Output: 1 orders/42
}

func ExampleOpenRegistry() {
	ctx := context.Background()
	reg, closeReg, err := ops.OpenRegistry(ctx, "mem://ops-registry", "", "")
	if err != nil {
		panic(err)
	}
	defer closeReg()
	_, _ = reg.Track(ctx, jobs.Job{ID: "j1"}, time.Minute)
	c, _ := reg.(jobs.Inspector).Counts(ctx) // the operator's view: the registries it opens have it
	fmt.Println(c.Tracked)
	_, _, err = ops.OpenRegistry(ctx, "etcd://127.0.0.1:2379", "", "")
	fmt.Println(err)
	// Output:
	// 1
	// no jobs registry: etcd has no jobs registry (use --jobs redis://… or postgres://…)
}

func ExampleSource_Retry() {
	ctx := context.Background()
	src, _ := ops.Open(ctx, ops.Config{Backend: "mem://ops-retry", Owner: "operator"})
	defer src.Close()
	j, _ := src.Jobs.Track(ctx, jobs.Job{ID: "poison"}, time.Minute)
	_ = src.Jobs.Bury(ctx, j.Ref(), "its workers keep crashing")
	back, err := src.Retry(ctx, "poison")
	fmt.Println(back.ID, back.Owner, back.Attempt, err)
	_, err = src.Retry(ctx, "poison")
	fmt.Println(err)
	// Output:
	// poison operator 0 <nil>
	// not found: no dead job "poison" (list them with: leasehold jobs)
}

func ExampleDur() {
	for _, d := range []time.Duration{850 * time.Millisecond, 12340 * time.Millisecond, 252 * time.Second, 185 * time.Minute} {
		fmt.Println(ops.Dur(d))
	}
	// Output:
	// 850ms
	// 12.3s
	// 4m12s
	// 3h05m
}
