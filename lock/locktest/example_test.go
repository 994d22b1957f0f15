package locktest_test

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// A backend's conformance test, in a _test.go file of its package. Run needs
// the *testing.T of a test function (TestConformance below), which go test
// does not hand to an example, so this example is compile-only (no Output
// line). memlock's own conformance test is this one without the options.
func ExampleRun() {
	TestConformance := func(t *testing.T) {
		// Every instance the factory returns stands for one process: its
		// own owner identity, the same grants (here, one shared table).
		shared, err := memlock.New()
		if err != nil {
			t.Fatal(err)
		}
		locktest.Run(t, func(t testing.TB) lock.Lock {
			l, err := shared.Share()
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
			locktest.WithShortTTL(200*time.Millisecond), // the tests that wait for an expiry
			locktest.WithRounds(20),                     // grants per contending goroutine
		)
	}
	_ = TestConformance
}

// The process-fault tests of a backend: a holder killed with SIGKILL, and
// one stopped past its ttl then continued, in child processes. TestMain
// must call HolderMain first: a child is this test binary, started again.
// connect and the environment stand for the backend's own; here a Redis
// server whose address the parent passes to its children. Compile-only.
func ExampleRunProcessFaults() {
	connect := func() (lock.Lock, error) {
		client := redis.NewClient(&redis.Options{Addr: os.Getenv("MYAPP_REDIS_ADDR")})
		return redislock.New(client)
	}
	TestMain := func(m *testing.M) {
		locktest.HolderMain(connect) // returns at once unless this process is a holder child
		os.Exit(m.Run())
	}
	TestProcessFaults := func(t *testing.T) {
		env := []string{"MYAPP_REDIS_ADDR=" + os.Getenv("MYAPP_REDIS_ADDR")}
		locktest.RunProcessFaults(t, func(t testing.TB) lock.Lock {
			l, err := connect()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.(io.Closer).Close() })
			return l
		}, env, locktest.WithSlack(2*time.Second))
	}
	_, _ = TestMain, TestProcessFaults
}

// The benchmark every backend runs, so that the figures compare.
func ExampleBenchTryAcquireRelease() {
	BenchmarkTryAcquireRelease := func(b *testing.B) {
		l, err := memlock.New()
		if err != nil {
			b.Fatal(err)
		}
		locktest.BenchTryAcquireRelease(b, l)
	}
	_ = BenchmarkTryAcquireRelease
}

// The shared-grant benchmark: TryAcquireShared against TryAcquire.
func ExampleBenchSharedAcquireRelease() {
	BenchmarkShared := func(b *testing.B) {
		l, err := memlock.New()
		if err != nil {
			b.Fatal(err)
		}
		locktest.BenchSharedAcquireRelease(b, l)
	}
	_ = BenchmarkShared
}

// The all-of benchmark over 4 keys: one TryAcquireAll against 4
// TryAcquire calls.
func ExampleBenchGroup() {
	BenchmarkGroup4 := func(b *testing.B) {
		l, err := memlock.New()
		if err != nil {
			b.Fatal(err)
		}
		locktest.BenchGroup(b, l, 4)
	}
	_ = BenchmarkGroup4
}

// 8 readers and a writer on one key, each its own instance (run with
// -benchtime 10s).
func ExampleBenchReadersWriter() {
	BenchmarkReadersWriter := func(b *testing.B) {
		l, err := memlock.New()
		if err != nil {
			b.Fatal(err)
		}
		readers := make([]lock.SharedLock, 8)
		for i := range readers {
			if readers[i], err = l.Share(); err != nil {
				b.Fatal(err)
			}
		}
		locktest.BenchReadersWriter(b, readers, l)
	}
	_ = BenchmarkReadersWriter
}

// A backend's check of lock.ReleaseEach, with its chunk size made small
// (by an export_test.go of its own) so that the checked handles straddle
// chunks. Compile-only, as ExampleRun.
func ExampleRunReleaseEach() {
	TestReleaseEach := func(t *testing.T) {
		shared, err := memlock.New()
		if err != nil {
			t.Fatal(err)
		}
		locktest.RunReleaseEach(t, func(t testing.TB) lock.Lock {
			l, err := shared.Share()
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, locktest.WithReleaseChunk(7)) // the chunk size the backend's test set
	}
	_ = TestReleaseEach
}

// A backend's benchmark of a Keeper's releases: Close of 10,000 leases,
// and 10,000 concurrent Lease.Release calls. Compile-only.
func ExampleBenchKeeperRelease() {
	BenchmarkKeeperRelease := func(b *testing.B) {
		l, err := memlock.New()
		if err != nil {
			b.Fatal(err)
		}
		locktest.BenchKeeperRelease(b, l, 10_000, nil)
	}
	_ = BenchmarkKeeperRelease
}
