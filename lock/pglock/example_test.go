package pglock_test

import (
	"context"
	"errors"
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
	l, err := pglock.New(pool, pglock.WithNamespace("billing"), pglock.WithCommon(lock.Common{Owner: "worker-7"}))
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
	// CREATE TABLE IF NOT EXISTS "locks"."leasehold_incarnations"
	// CREATE UNLOGGED TABLE IF NOT EXISTS "locks"."leasehold_group_keys"
	// CREATE FUNCTION "locks"."leasehold_remaining_v2"
	// CREATE UNLOGGED TABLE IF NOT EXISTS "locks"."leasehold_intents"
	// CREATE FUNCTION "locks"."leasehold_refused_v1"
}

// Through PgBouncer in session mode (pool_mode=session, port 6432): each
// client connection keeps its server session, which advisory locks need.
// Transaction mode cannot work and is refused (ErrPooler).
func ExampleWithSessionPooler() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@pgbouncer.internal:6432/app?sslmode=require",
		pglock.WithSessionPooler())
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if _, err := lock.HealthCheck(ctx, l); err != nil {
		log.Fatal(err)
	}
}

// Availability over the quarantine: after a restart or failover the
// server grants at once, and fencing tokens alone order the writes of a
// successor and of a holder that has not yet learnt of its loss. Every
// Lock on the database should say the same.
func ExampleWithoutQuarantine() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db1.internal,db2.internal/app?target_session_attrs=read-write",
		pglock.WithoutQuarantine())
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}

// A try in the quarantine after a failover is refused with the time left;
// lock.Acquire waits it out by itself.
func ExampleErrQuarantined() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db1.internal,db2.internal/app?target_session_attrs=read-write")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	h, err := l.TryAcquire(ctx, "reports/daily", time.Minute)
	switch {
	case errors.Is(err, pglock.ErrQuarantined):
		log.Printf("the server failed over; no grants for %v", lock.RemainingTTL(err))
		return
	case err != nil:
		log.Fatal(err)
	}
	defer h.Release(ctx)
}

// The token sequence and the key table in a schema of their own, created
// once by a role that may (see Lock.Setup and SetupStatements).
func ExampleWithSchema() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app", pglock.WithSchema("locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	h, err := l.TryAcquire(ctx, "reports/daily", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(ctx)
}

// Waiting in PostgreSQL's own queue for the advisory lock: the release
// hands the key to the first waiter; no herd wakes up. lock.Acquire does
// this for you on pglock.
func ExampleLock_AcquireQueued() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	h, err := l.AcquireQueued(ctx, "migrations", 5*time.Minute)
	if err != nil {
		log.Fatal(err) // ctx ended (nothing is held) or the server is unavailable
	}
	defer h.Release(context.Background())
	if n, err := l.Waiting(ctx, "migrations"); err == nil {
		fmt.Println(n, "other instances wait behind this one")
	}
}

// One-off claims ("whoever claims this first does it") that hold no
// session while they last: lock.Claim uses this on pglock.
func ExampleLock_Claim() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	token, err := lock.Claim(ctx, l, "invoices/2030-01-01", 24*time.Hour)
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		fmt.Println("another instance sends today's invoices")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("sending today's invoices, claim token", token)
	}
}

// Who holds a key, as an operator's tool asks it.
func ExampleLock_Inspect() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	g, held, err := l.Inspect(ctx, "reports/daily")
	switch {
	case err != nil:
		log.Fatal(err)
	case !held:
		fmt.Println("free")
	default:
		fmt.Printf("held by %s since %v, token %d\n", g.Owner, g.Since, g.Token)
	}
}

// Many readers of a configuration at once, one writer that reloads it:
// lock.DoShared for the readers, lock.Do for the writer, which waits in
// the server's queue and holds new readers off while it waits.
func ExampleLock_TryAcquireShared() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	h, err := l.TryAcquireShared(ctx, "config", 30*time.Second)
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		fmt.Println("a writer holds the configuration or waits for it")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("reading the configuration under token", h.Token())
		_ = h.Release(ctx)
	}
	// Or block until a share is granted, keep it while fn runs:
	err = lock.DoShared(ctx, l, "config", func(ctx context.Context) error {
		return nil // read
	}, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// Locking an order and its customer together, all or none: lock.DoAll
// waits without ever holding a part of the set, so overlapping sets never
// deadlock.
func ExampleLock_TryAcquireAll() {
	ctx := context.Background()
	l, err := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	g, err := l.TryAcquireAll(ctx, []string{"order/42", "customer/7"}, time.Minute)
	if err != nil {
		log.Fatal(err) // lock.ErrNotAcquired names a held key and when all may be free
	}
	fmt.Println("tokens", g.Tokens()) // one per key, in the order of g.Keys()
	_ = g.Release(ctx)

	err = lock.DoAll(ctx, l, []string{"order/42", "customer/7"}, func(ctx context.Context, g lock.Group) error {
		return nil // fence each key's write with its token
	}, lock.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleMaxGroupKeys() {
	fmt.Println(pglock.MaxGroupKeys, "keys at most in one TryAcquireAll")
	// Output: 64 keys at most in one TryAcquireAll
}

func ExampleLock_NewBatch() {
	ctx := context.Background()
	l, _ := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	defer l.Close()
	// Many grants on at most 4 server sessions, whose idle_session_timeout
	// is the grants' shared ttl.
	b, err := l.NewBatch(ctx, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx) // ends the sessions: every key is free
	var hs []lock.Handle
	for i := range 1000 {
		h, err := b.TryAcquire(ctx, fmt.Sprint("partition/", i))
		if err != nil {
			continue // lock.ErrNotAcquired: another process owns it
		}
		hs = append(hs, h)
	}
	// Every 10 s: one statement per session renews them all.
	for i, err := range b.Renew(ctx, hs) {
		if errors.Is(err, lock.ErrLost) {
			fmt.Println("lost", hs[i].Key()) // its session ended: stop its work
		}
	}
}

func ExampleWithBatchSessions() {
	ctx := context.Background()
	// A batch of 20,000 grants on 8 sessions, on a server whose lock table
	// holds them: max_locks_per_transaction × (max_connections +
	// max_prepared_transactions) ≥ 20,000 plus what others hold.
	l, _ := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app", pglock.WithBatchSessions(8))
	defer l.Close()
	b, err := l.NewBatch(ctx, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(ctx)
}

func ExampleLock_ClaimEach() {
	ctx := context.Background()
	l, _ := pglock.NewFromDSN(ctx, "postgres://app@db.internal/app")
	defer l.Close()
	// The ticks due at one instant, claimed in one statement per 1,000.
	reqs := []lock.ClaimRequest{
		{Key: "tick/invoices/1732500000", TTL: time.Minute},
		{Key: "tick/reports/1732500000", TTL: time.Minute},
	}
	for i, r := range l.ClaimEach(ctx, reqs) {
		switch {
		case r.Err == nil:
			fmt.Println("run", reqs[i].Key, "under token", r.Token)
		case errors.Is(r.Err, lock.ErrNotAcquired):
			// Another scheduler runs this tick.
		}
	}
}
