package memjobs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
)

func ExampleNew() {
	ctx := context.Background()
	reg := memjobs.New() // in process: for tests, simulations and single-process programs
	j, _ := reg.Track(ctx, jobs.Job{ID: "email-1", Payload: []byte("to: ada"), Owner: "worker-1"}, time.Minute)
	// One heartbeat for all of a worker's jobs; it reports the ones lost.
	lost, _ := reg.Heartbeat(ctx, []jobs.Ref{j.Ref(), {ID: "email-2", Epoch: 9}}, time.Minute)
	fmt.Println("lost:", lost)
	c, _ := reg.Counts(ctx)
	fmt.Printf("tracked %d, expired %d, dead %d\n", c.Tracked, c.Expired, c.Dead)
	fmt.Println(reg.Done(ctx, j.Ref()))
	// Output:
	// lost: [email-2]
	// tracked 1, expired 0, dead 0
	// <nil>
}
