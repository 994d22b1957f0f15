package pglock_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

func TestMain(m *testing.M) {
	locktest.HolderMain(func() (lock.Lock, error) {
		return pglock.NewFromDSN(context.Background(), os.Getenv("LEASEHOLD_PG_DSN"))
	})
	testenv.Main(m)
}

// newLock returns a Lock with a pool of its own on dsn, closed at the end.
func newLock(t testing.TB, dsn string, opts ...lock.Option) *pglock.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := pglock.NewFromDSN(ctx, withPoolSize(dsn, 24), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func withPoolSize(dsn string, n int) string {
	return dsn + "&pool_max_conns=" + strconv.Itoa(n)
}

// connect returns a plain connection, closed at the end.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	srv := testenv.Postgres(t)
	locktest.Run(t, func(t testing.TB) lock.Lock { return newLock(t, srv.DSN()) })
}

func TestProcessFaults(t *testing.T) {
	srv := testenv.Postgres(t)
	locktest.RunProcessFaults(t, func(t testing.TB) lock.Lock { return newLock(t, srv.DSN()) }, srv.Env())
}

// Since is the grant's server time and stays so across Extend; it was
// always zero before (issue #4).
func TestInspectSinceSurvivesExtend(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	l := newLock(t, testenv.Postgres(t).DSN())
	before := time.Now().Add(-time.Second) // server and test share a clock here
	h, err := l.TryAcquire(ctx, "since/"+t.Name(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	g, ok, err := l.Inspect(ctx, h.Key())
	if err != nil || !ok {
		t.Fatal(g, ok, err)
	}
	if g.Since.Before(before) || g.Since.After(time.Now().Add(time.Second)) || g.Owner != l.Owner() || g.Token != h.Token() {
		t.Fatalf("Inspect = %+v, want Since about now, owner %q, token %d", g, l.Owner(), h.Token())
	}
	if err := h.Extend(ctx, 7*time.Second); err != nil {
		t.Fatal(err)
	}
	g2, ok, err := l.Inspect(ctx, h.Key())
	if err != nil || !ok {
		t.Fatal(g2, ok, err)
	}
	if !g2.Since.Equal(g.Since) || g2.Remaining <= 5*time.Second {
		t.Fatalf("after Extend(7s): Inspect = %+v, want Since %v and more than 5s remaining", g2, g.Since)
	}
}
