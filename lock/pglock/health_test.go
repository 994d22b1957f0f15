package pglock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// HealthCheck adds no row to leasehold_keys: each probe used to take a
// grant on a new key, whose name was stored there for good, so the table
// grew with every probe.
func TestHealthCheckAddsNoKeyRows(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := connect(t, srv.DSN())
	schema := fmt.Sprintf("health_%d", time.Now().UnixNano())
	ctx := ctxFor(t, time.Minute)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	l := newLock(t, srv.DSN(), pglock.WithSchema(schema))
	if err := l.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	rows := func() (n int) {
		t.Helper()
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".leasehold_keys").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := rows()
	const probes = 20
	for range probes {
		if _, err := lock.HealthCheck(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if after := rows(); after != before {
		t.Fatalf("leasehold_keys went from %d to %d rows over %d probes; a probe must leave nothing behind", before, after, probes)
	}
}
