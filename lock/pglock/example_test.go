package pglock_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

func ExampleNew() {
	ctx := context.Background()
	// A pool of its own: each held grant keeps one connection.
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app?pool_max_conns=32")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	l, err := pglock.New(pool, pglock.WithNamespace("billing"), lock.WithOwner("worker-7"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	err = lock.Do(ctx, l, "reports/daily", func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		// Fence the protected write: UPDATE ... WHERE fence <= $token.
		fmt.Println("generating the report under token", token)
		return nil
	}, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleNewFromDSN() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close() // also closes the pool NewFromDSN made
	h, err := l.TryAcquire(ctx, "migrations", time.Minute)
	if err != nil {
		log.Fatal(err) // lock.ErrNotAcquired when someone else holds it
	}
	defer h.Release(ctx)
	fmt.Println("token", h.Token())
}

func ExampleLock_Setup() {
	// Run once with a role that may create the sequence and the key table,
	// when the application's role may not.
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://admin@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if err := l.Setup(ctx); err != nil {
		log.Fatal(err)
	}
}

func ExampleLock_TryAcquireAny() {
	ctx := context.Background()
	l, _ := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	defer l.Close()
	h, err := l.TryAcquireAny(ctx, []string{"gpu/0", "gpu/1", "gpu/2"}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("got", h.Key())
}

func ExampleLock_List() {
	ctx := context.Background()
	l, _ := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	defer l.Close()
	grants, err := l.List(ctx, "reports/")
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range grants {
		fmt.Printf("%s held by %s, token %d, %v left\n", g.Key, g.Owner, g.Token, g.Remaining)
	}
}

func ExampleLock_ForceRelease() {
	ctx := context.Background()
	l, _ := pglock.NewFromDSN(ctx, "postgres://admin@db.internal/app")
	defer l.Close()
	ended, err := l.ForceRelease(ctx, "jobs/stuck")
	fmt.Println(ended, err)
}

func ExampleID() {
	// The advisory lock id of a key, to find it in pg_locks:
	// SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
	//   AND ((classid::int8 << 32) | objid::int8) = <id>;
	fmt.Println(pglock.ID(pglock.DefaultNamespace, "reports/daily"))
}

// The statements that create pglock's objects, for a DBA.
func ExampleSetupStatements() {
	for _, stmt := range pglock.SetupStatements("locks") {
		fmt.Println(strings.TrimSpace(strings.SplitN(stmt, "(", 2)[0]))
	}
	// Output:
	// CREATE SEQUENCE IF NOT EXISTS "locks"."leasehold_tokens" AS bigint MINVALUE 1
	// CREATE TABLE IF NOT EXISTS "locks"."leasehold_keys"
	// CREATE TABLE IF NOT EXISTS "locks"."leasehold_claims"
	// CREATE INDEX IF NOT EXISTS leasehold_claims_until ON "locks"."leasehold_claims"
	// CREATE FUNCTION "locks"."leasehold_remaining_v2"
}
