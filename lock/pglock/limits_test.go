package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// A holder's application_name is read back as "<token> <ttl ms> ...": any
// session that holds the key's advisory lock can set it. A ttl field too
// large for bigint made the acquire statement (and Inspect) fail with
// "bigint out of range", reported as ErrUnavailable, which waiters retry
// forever; it must read as a held key with an unknown remaining ttl.
func TestForeignHolderApplicationName(t *testing.T) {
	srv := testenv.Postgres(t)
	l := newLock(t, srv.DSN())
	c := connect(t, srv.DSN())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "limits/" + t.Name()
	if _, err := c.Exec(ctx, `SELECT set_config('application_name', '99999999999999999999 99999999999999999999 1 x', false),
		pg_advisory_lock($1::int8)`, pglock.ID(pglock.DefaultNamespace, key)); err != nil {
		t.Fatal(err)
	}
	_, err := l.TryAcquire(ctx, key, time.Minute)
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a key held by a foreign session: %v, want ErrNotAcquired", err)
	}
	if r := lock.RemainingTTL(err); r < 0 || r > lock.MaxTTL {
		t.Fatalf("hint %v", r)
	}
	if _, err := l.TryAcquireAny(ctx, []string{key, key}, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAny: %v, want ErrNotAcquired", err)
	}
	if _, _, err := l.Inspect(ctx, key); err != nil {
		t.Fatalf("Inspect: %v", err)
	}
}
