package pgjobs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newPool(t testing.TB) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), testenv.Postgres(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var tables atomic.Int64

func TestConformance(t *testing.T) {
	pool := newPool(t)
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, err := pgjobs.New(pool, fmt.Sprintf("test_jobs_%d", tables.Add(1)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}
