package pgjobs_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// Compile-only (no Output): it needs a PostgreSQL server.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reg, err := pgjobs.New(pool, "billing_jobs") // tables billing_jobs and billing_jobs_dead
	if err != nil {
		log.Fatal(err)
	}
	l, err := pglock.New(pool) // elects the recoverer on the same database
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	r, err := jobs.NewRunner(reg, l, func(ctx context.Context, j jobs.Job, delay time.Duration) error {
		// Put j back on the queue, to run after delay.
		_, err := pool.Exec(ctx, "INSERT INTO billing_queue (id, payload, run_at) VALUES ($1, $2, now() + $3 * interval '1 millisecond')",
			j.ID, j.Payload, delay.Milliseconds())
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = r.Run(ctx) }()
}

// Compile-only (no Output): it needs a PostgreSQL server.
func ExampleRegistry_Setup() {
	// Run once with a role that may create tables, when the application's
	// role may not; the application's registry then finds them.
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://admin@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reg, err := pgjobs.New(pool, "billing_jobs")
	if err != nil {
		log.Fatal(err)
	}
	if err := reg.Setup(ctx); err != nil {
		log.Fatal(err)
	}
}
