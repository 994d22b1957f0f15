package locktest_test

import (
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// A backend's conformance test, in a _test.go file of its package. Run needs
// the *testing.T of a test function (TestConformance below), which go test
// does not hand to an example, so this example is compile-only (no Output
// line). memlock's own conformance test is this one without the options.
func ExampleRun() {
	TestConformance := func(t *testing.T) {
		// Every instance the factory returns stands for one process: its
		// own owner identity, the same grants (here, one shared table).
		shared := memlock.New()
		locktest.Run(t, func(testing.TB) lock.Lock { return shared.Share() },
			locktest.ShortTTL(200*time.Millisecond), // the tests that wait for an expiry
			locktest.Rounds(20),                     // grants per contending goroutine
		)
	}
	_ = TestConformance
}
