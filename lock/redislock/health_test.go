package redislock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// healthDB is a database of the test server that no other test uses, so
// that its DBSIZE counts the probes' keys alone.
const healthDB = 9

// HealthCheck leaves no key behind: each probe used to take a grant on a
// new key, whose fence counter stayed for an hour after the release.
func TestHealthCheckLeavesNoKeys(t *testing.T) {
	srv := testenv.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: healthDB})
	t.Cleanup(func() { _ = client.Close() })
	l := newLock(t, client)
	ctx := t.Context()
	before, err := client.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	const probes = 20
	for range probes {
		if _, err := lock.HealthCheck(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	after, err := client.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("DBSIZE went from %d to %d over %d probes; a probe must leave nothing behind", before, after, probes)
	}
}
