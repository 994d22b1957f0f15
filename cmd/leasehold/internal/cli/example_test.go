package cli_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/cli"
	"github.com/leasehold-go/leasehold/lock"
)

func ExampleRun() {
	ctx := context.Background()
	// Another part of this process holds a key on the shared in-process
	// table "example"; the command sees it as it would on Redis.
	l, _, _ := backend.Open(ctx, "mem://example", backend.WithCommon(lock.Common{Owner: "worker-1"}))
	_, _ = l.TryAcquire(ctx, "reports/daily", time.Minute)

	code := cli.Run(ctx, []string{"release", "reports/daily", "--backend", "mem://example"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	code = cli.Run(ctx, []string{"release", "reports/daily", "--force", "--backend", "mem://example"}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	// Output:
	// leasehold: --force is required to release a key held by someone else: "reports/daily" is held by worker-1 (token 1, 1m0s left); re-run with --force to remove the grant (the holder's resource must check fencing tokens)
	// Run 'leasehold --help' for usage.
	// exit 2
	// released "reports/daily" (was held by worker-1, token 1)
	// exit 0
}
