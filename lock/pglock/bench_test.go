package pglock_test

import (
	"context"
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock/locktest"
)

// BenchmarkPgFloor is the raw two-round-trip floor of a PostgreSQL lock:
// pg_try_advisory_lock, then pg_advisory_unlock, on one connection. No
// fencing, no ttl, no checks.
func BenchmarkPgFloor(b *testing.B) {
	c := connect(b, testenv.Postgres(b).DSN())
	ctx := context.Background()
	const key = 0x5eed_f100
	for b.Loop() {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(key)).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkPgTryAcquireRelease is the same work through pglock: one round
// trip each way, with a fencing token, the server-enforced ttl, the pooler
// check, and a connection taken from and returned to the pool.
func BenchmarkPgTryAcquireRelease(b *testing.B) {
	locktest.BenchTryAcquireRelease(b, newLock(b, testenv.Postgres(b).DSN()))
}

// BenchmarkPgHandoff: release → a goroutine blocked in lock.Acquire on
// another Lock instance (its own pool and waiting connection) holds the key.
func BenchmarkPgHandoff(b *testing.B) {
	dsn := testenv.Postgres(b).DSN()
	locktest.BenchHandoff(b, newLock(b, dsn), newLock(b, dsn))
}

// BenchmarkPgHandoffProcess: the same, to a child process blocked in
// lock.Acquire. Run with a fixed count: -benchtime 30x.
func BenchmarkPgHandoffProcess(b *testing.B) {
	srv := testenv.Postgres(b)
	locktest.BenchHandoffProcess(b, newLock(b, srv.DSN()), srv.Env())
}
