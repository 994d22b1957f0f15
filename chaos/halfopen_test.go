package chaos_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// A PostgreSQL holder whose connection goes silent (a blackhole: no FIN,
// no RST) for longer than ttl + 1 s while the server keeps the session:
// the server ends the session by idle_session_timeout, so the grant is
// freed; a successor is granted only after the holder's ValidUntil; the
// holder learns the loss (Keep's context, cause lock.ErrLost) by then.
func TestPostgresHalfOpenHolder(t *testing.T) {
	srv := testenv.Postgres(t)
	ttl := time.Second
	key := "chaos/half-open/" + strconv.FormatInt(time.Now().UnixNano(), 10)
	proxy := faultproxy.Start(t, srv.Addr())
	_, port, _ := net.SplitHostPort(proxy.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holderLock, err := pglock.NewFromDSN(ctx, strings.Replace(srv.DSN(), srv.Addr(), "127.0.0.1:"+port, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer holderLock.Close()
	successorLock, err := pglock.NewFromDSN(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer successorLock.Close()
	admin, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())

	h, err := lock.Acquire(ctx, holderLock, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := lock.Keep(context.Background(), h, ttl)
	if err != nil {
		t.Fatal(err)
	}
	lost := make(chan time.Time, 1)
	context.AfterFunc(lease.Context(), func() { lost <- time.Now() })
	var pid int
	if err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1", strconv.FormatUint(h.Token(), 10)+" %").Scan(&pid); err != nil {
		t.Fatalf("the holder's session: %v", err)
	}

	silent := ttl + 1500*time.Millisecond
	proxy.SetMode(faultproxy.Blackhole)
	cut := time.Now()
	s, err := lock.Acquire(ctx, successorLock, key, ttl)
	granted := time.Now()
	if err != nil {
		t.Fatalf("the successor: %v", err)
	}
	validUntil := lease.ValidUntil() // the last: no renewal got through after the cut
	defer s.Release(context.Background())
	t.Logf("successor granted %v after the cut; the holder was valid until %v after it",
		granted.Sub(cut).Round(time.Millisecond), validUntil.Sub(cut).Round(time.Millisecond))
	if !granted.After(validUntil) {
		t.Fatalf("successor granted at %s, before the holder's ValidUntil %s", ts(granted), ts(validUntil))
	}
	if s.Token() <= h.Token() {
		t.Fatalf("successor token %d after %d", s.Token(), h.Token())
	}
	// The holder knew by its ValidUntil, without a packet from the server.
	select {
	case at := <-lost:
		if at.After(validUntil.Add(100 * time.Millisecond)) {
			t.Fatalf("the holder learned of the loss at %s, after its ValidUntil %s", ts(at), ts(validUntil))
		}
		if cause := context.Cause(lease.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Fatalf("the holder's cause: %v, want lock.ErrLost", cause)
		}
	default:
		t.Fatal("the holder was not told of the loss by the time its successor was granted")
	}
	// The server, not the client, ended the holder's session.
	n := 1
	for deadline := time.Now().Add(2 * time.Second); n != 0 && time.Now().Before(deadline); sleep(ctx, 20*time.Millisecond) {
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if n != 0 {
		t.Fatalf("the silent holder's session %d still exists", pid)
	}
	// The connection stays silent past ttl + 1 s; then it heals, and the
	// holder's release reports the loss.
	sleep(ctx, time.Until(cut.Add(silent)))
	proxy.SetMode(faultproxy.Pass)
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if err := lease.Release(rctx); err == nil {
		t.Fatal("the silent holder's Release succeeded after its session was ended")
	}
}
