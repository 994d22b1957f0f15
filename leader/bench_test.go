package leader_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
)

// BenchmarkLeaderFailover measures, per networked backend, the time from
// the end of a leader process (SIGKILL, or a graceful shutdown) to the
// election of a peer process, with the test lease of 1 s (renew 300 ms,
// retry 500 ms). Every round starts processes: run it with a fixed count,
// -benchtime 5x. It reports the median in ms.
func BenchmarkLeaderFailover(b *testing.B) {
	for _, kind := range backends.Networked(b) {
		be := kind(b)
		for _, how := range []string{"sigkill", "graceful"} {
			b.Run(be.Name+"/"+how, func(b *testing.B) {
				var took []time.Duration
				for b.Loop() {
					name := fmt.Sprintf("bench-%s-%d", how, time.Now().UnixNano())
					cs, events := startCandidates(b, be, name, 2)
					e1 := next(b, events, "ELECTED", 30*time.Second, anyOf(0, 1))
					other := 1 - e1.who
					// Let the follower settle into its wait.
					time.Sleep(50 * time.Millisecond)
					start := time.Now()
					if how == "sigkill" {
						cs[e1.who].Signal(b, syscall.SIGKILL)
					} else {
						cs[e1.who].Send(b, "QUIT")
					}
					e2 := next(b, events, "ELECTED", 10*time.Second, func(i int) bool { return i == other })
					took = append(took, e2.at.Sub(start))
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "failover-ms")
			})
		}
	}
}
