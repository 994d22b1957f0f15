package registrytest_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

// Compile-only (no Output): Run takes the *testing.T of a test. In the
// _test.go file of a jobs.Registry implementation, the factory returns a
// registry over fresh, empty state for each subtest (its own namespace or
// table).
func ExampleRun() {
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		registrytest.Run(t, func(t testing.TB) jobs.Registry {
			return memjobs.New()
		})
	}
}
