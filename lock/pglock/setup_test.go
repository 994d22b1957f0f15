package pglock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// Processes that use a fresh database at the same moment all create the
// sequence, table and function; the losers of those races must find them
// made, not fail. CREATE TABLE IF NOT EXISTS can collide on the table's row
// type (42710) as well as on its name (42P07, 23505).
func TestConcurrentFirstUse(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := connect(t, srv.DSN())
	for round := range 30 {
		if !t.Run(fmt.Sprint(round), func(t *testing.T) { firstUse(t, srv.DSN(), admin, round) }) {
			return
		}
	}
}

// firstUse makes 16 Locks take their first grant at once in a new schema.
func firstUse(t *testing.T, dsn string, admin *pgx.Conn, round int) {
	schema := fmt.Sprintf("first_use_%d_%d", time.Now().UnixNano(), round)
	if _, err := admin.Exec(ctxFor(t, 10*time.Second), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	const n = 16
	locks := make([]*pglock.Lock, n)
	for i := range locks {
		locks[i] = newLock(t, dsn, pglock.WithSchema(schema))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			<-start
			h, err := l.TryAcquire(ctxFor(t, 20*time.Second), fmt.Sprintf("first-use/%d", i), time.Minute)
			if err != nil {
				t.Errorf("round %d, lock %d: %v", round, i, err)
				return
			}
			_ = h.Release(ctxFor(t, 10*time.Second))
		})
	}
	close(start)
	wg.Wait()
}
