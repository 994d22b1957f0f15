package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/pglock"
)

// holderPID is the backend pid of the session that holds key (0 if none).
func holderPID(t testing.TB, c *pgx.Conn, key string) int32 {
	t.Helper()
	var pid int32
	err := c.QueryRow(ctxFor(t, 10*time.Second), `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND granted
		  AND ((classid::int8 << 32) | objid::int8) = $1`, pglock.ID(pglock.DefaultNamespace, key)).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func waitDone(t testing.TB, ctx context.Context, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// The holder's session is terminated by an operator: another instance gets
// the key at once, the holder's Keep context is cancelled, its Release
// returns ErrLost and its fenced write is refused.
func TestTerminateBackend(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := connect(t, srv.DSN())
	holder, other := newLock(t, srv.DSN()), newLock(t, srv.DSN())
	key := "terminate/" + t.Name()
	ttl := 30 * time.Second
	h, err := holder.TryAcquire(ctxFor(t, 10*time.Second), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := lock.Keep(context.Background(), h, ttl)
	if err != nil {
		t.Fatal(err)
	}
	var fence lock.Fence
	if err := fence.Do(h.Token(), nil); err != nil {
		t.Fatal(err)
	}
	pid := holderPID(t, admin, key)
	var ok bool
	if err := admin.QueryRow(ctxFor(t, 10*time.Second), "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v %v", pid, ok, err)
	}
	start := time.Now()
	h2, err := lock.Acquire(ctxFor(t, 5*time.Second), other, key, ttl)
	if err != nil {
		t.Fatalf("another instance could not acquire after the holder's session was terminated: %v", err)
	}
	defer h2.Release(context.Background())
	t.Logf("acquired %v after pg_terminate_backend", time.Since(start).Round(time.Microsecond))
	if h2.Token() <= h.Token() {
		t.Fatalf("token %d after %d", h2.Token(), h.Token())
	}
	if err := fence.Do(h2.Token(), nil); err != nil {
		t.Fatal(err)
	}
	// The holder learns of it by itself (lock.LossNotifier), well before
	// its next renewal (ttl/3 = 10 s).
	waitDone(t, lease.Context(), 5*time.Second, "the holder's Keep context cancelled")
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("lease ended with %v, want ErrLost", context.Cause(lease.Context()))
	}
	if err := fence.Do(h.Token(), nil); !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("the old holder's fenced write: %v, want ErrStaleToken", err)
	}
	if err := lease.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("the old holder's Release: %v, want ErrLost", err)
	}
	if err := h2.Extend(ctxFor(t, 10*time.Second), ttl); err != nil {
		t.Fatalf("the new holder's Extend: %v", err)
	}
}

// A holder process stopped past its ttl: the server ends its idle session
// (idle_session_timeout), which frees the lock; a second process acquires
// with a larger token; continued, the first learns that it lost the key.
func TestStoppedHolderSessionEndedByServer(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := connect(t, srv.DSN())
	key := "sigstop/" + t.Name()
	ttl := time.Second
	child := locktest.StartHolder(t, srv.Env(), key, ttl)
	pid := holderPID(t, admin, key)
	if pid == 0 {
		t.Fatal("the child holds no lock")
	}
	child.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	l := newLock(t, srv.DSN())
	h, err := lock.Acquire(ctxFor(t, ttl+5*time.Second), l, key, time.Minute)
	if err != nil {
		t.Fatalf("acquire while the holder is stopped: %v", err)
	}
	defer h.Release(context.Background())
	t.Logf("acquired %v after SIGSTOP (ttl %v)", time.Since(stopped).Round(time.Millisecond), ttl)
	if h.Token() <= child.Token() {
		t.Fatalf("token %d after %d", h.Token(), child.Token())
	}
	// The child's session is gone: the server ended it, not the child
	// (stopped, it can do nothing). A backend that exits frees its
	// advisory locks before it leaves pg_stat_activity, so the row may
	// outlive the lock by a moment.
	var n int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := admin.QueryRow(ctxFor(t, 10*time.Second), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		if err == nil && n == 0 {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("the stopped holder's session %d still exists 5 s after its lock was free (%d, %v)", pid, n, err)
		}
	}
	child.Signal(syscall.SIGCONT)
	if cause, ok := child.WaitLost(10 * time.Second); !ok {
		t.Fatal("the continued holder was not told of its loss")
	} else {
		t.Logf("continued holder: %s", cause)
	}
	if got := child.Release(); got != "lost" {
		t.Fatalf("the continued holder's Release: %q, want lost", got)
	}
}

// An immediate shutdown and restart of the server while locks are held:
// every holder learns of the loss, no key is granted again before the
// lost holders' ValidUntil (the restarted server's quarantine), and later
// tokens are larger.
func TestServerRestart(t *testing.T) {
	srv := testenv.NewPostgres(t)
	a, b := newLock(t, srv.DSN()), newLock(t, srv.DSN())
	ttl := 3 * time.Second
	var leases []*lock.Lease
	var highest uint64
	for i, l := range []*pglock.Lock{a, a, b, b} {
		h, err := l.TryAcquire(ctxFor(t, 10*time.Second), fmt.Sprintf("restart/%d", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		lease, err := lock.Keep(context.Background(), h, ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
		highest = max(highest, h.Token())
	}
	srv.Restart(t) // pg_ctl stop -m immediate, then start
	// Before the holders' ValidUntil, the restarted server grants none of
	// their keys: a restart forgets its advisory locks, not the ttls
	// recorded for them.
	h, err := b.TryAcquire(ctxFor(t, 10*time.Second), "restart/0", ttl)
	if err == nil {
		_ = h.Release(context.Background())
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a lost holder's key right after the restart: %v, want ErrNotAcquired (quarantine)", err)
	}
	var lastValid time.Time
	for i, lease := range leases {
		waitDone(t, lease.Context(), 10*time.Second, fmt.Sprintf("holder %d told of its loss", i))
		if v := lease.ValidUntil(); v.After(lastValid) {
			lastValid = v
		}
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("holder %d: %v, want ErrLost", i, context.Cause(lease.Context()))
		}
		if err := lease.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("holder %d's Release: %v, want ErrLost", i, err)
		}
	}
	for i, l := range []*pglock.Lock{a, b, newLock(t, srv.DSN())} {
		h, err := lock.Acquire(ctxFor(t, 20*time.Second), l, fmt.Sprintf("restart/%d", i), ttl)
		if err != nil {
			t.Fatalf("acquire after the restart: %v", err)
		}
		if now := time.Now(); now.Before(lastValid) {
			t.Fatalf("restart/%d granted again %v before a lost holder's ValidUntil", i, lastValid.Sub(now))
		}
		if h.Token() <= highest {
			t.Fatalf("token %d after the restart, want > %d", h.Token(), highest)
		}
		_ = h.Release(context.Background())
	}
}

// A PgBouncer in transaction mode hands each statement to any server
// session: acquire must refuse it with a clear error and leave no lock.
func TestPgBouncerTransactionMode(t *testing.T) {
	srv := testenv.Postgres(t)
	bouncer := testenv.NewPgBouncer(t, srv, "transaction")
	admin := connect(t, srv.DSN())
	for _, mode := range []string{"cache_statement", "exec"} {
		t.Run(mode, func(t *testing.T) {
			// exec: no named prepared statements, so the refusal comes from
			// the backend pid check in the acquire statement itself.
			l := newLock(t, bouncer.DSN()+"&default_query_exec_mode="+mode)
			key := "pooler/" + t.Name()
			for range 3 {
				h, err := l.TryAcquire(ctxFor(t, 10*time.Second), key, time.Minute)
				if err == nil {
					_ = h.Release(context.Background())
					t.Fatal("TryAcquire through a transaction-mode PgBouncer returned a handle")
				}
				if !errors.Is(err, pglock.ErrPooler) || !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "pooler") {
					t.Fatalf("TryAcquire through a transaction-mode PgBouncer: %v, want ErrPooler", err)
				}
			}
			// lock.Acquire gives up at once: waiting cannot fix the configuration.
			_, err := lock.Acquire(ctxFor(t, 10*time.Second), l, key, time.Minute)
			if !errors.Is(err, pglock.ErrPooler) {
				t.Fatalf("Acquire: %v, want ErrPooler", err)
			}
			if pid := holderPID(t, admin, key); pid != 0 {
				t.Fatalf("session %d holds the key after refused acquires", pid)
			}
			t.Logf("refused with: %v", err)
		})
	}
}

// In session mode a pooler pins one server session per client connection:
// with WithSessionPooler the lock works through it.
func TestPgBouncerSessionMode(t *testing.T) {
	srv := testenv.Postgres(t)
	bouncer := testenv.NewPgBouncer(t, srv, "session")
	key := "pooler/" + t.Name()
	if _, err := newLock(t, bouncer.DSN()).TryAcquire(ctxFor(t, 10*time.Second), key, time.Minute); !errors.Is(err, pglock.ErrPooler) {
		t.Fatalf("without WithSessionPooler: %v, want ErrPooler", err)
	}
	l := newLock(t, bouncer.DSN(), pglock.WithSessionPooler())
	h, err := l.TryAcquire(ctxFor(t, 10*time.Second), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newLock(t, srv.DSN()).TryAcquire(ctxFor(t, 10*time.Second), key, time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("direct acquire of a key held through the pooler: %v", err)
	}
	if err := h.Extend(ctxFor(t, 10*time.Second), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A server with a small lock table: exhausting it gives ErrLockTableFull
// (to TryAcquire, TryAcquireShared and TryAcquireAll), held grants keep
// working, and acquisition recovers once locks are freed.
func TestLockTableFull(t *testing.T) {
	srv := testenv.NewPostgres(t, testenv.PostgresSetting("max_locks_per_transaction", "10"))
	l := newLock(t, srv.DSN())
	ctx := ctxFor(t, time.Minute)
	ttl := time.Minute
	h, err := l.TryAcquire(ctx, "full/held", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Idle connections in the pool for the attempts below (a failed
	// attempt closes its own; a new one cannot connect while the table is
	// full).
	var warm []lock.Handle
	for i := range 4 {
		w, err := l.TryAcquire(ctx, fmt.Sprint("full/warm", i), ttl)
		if err != nil {
			t.Fatal(err)
		}
		warm = append(warm, w)
	}
	for _, w := range warm {
		_ = w.Release(ctx)
	}
	filler := connect(t, srv.DSN())
	_, err = filler.Exec(ctx, "SELECT count(pg_advisory_lock(g)) FROM generate_series(1, 1000000) g")
	if err == nil || !strings.Contains(err.Error(), "53200") {
		t.Fatalf("filling the lock table: %v, want SQLSTATE 53200", err)
	}
	_, err = l.TryAcquire(ctx, "full/new", ttl)
	if !errors.Is(err, pglock.ErrLockTableFull) || !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("TryAcquire with a full lock table: %v, want ErrLockTableFull", err)
	}
	t.Logf("refused with: %v", err)
	_, err = l.TryAcquireShared(ctx, "full/shared", ttl)
	if !errors.Is(err, pglock.ErrLockTableFull) {
		t.Fatalf("TryAcquireShared with a full lock table: %v, want ErrLockTableFull", err)
	}
	_, err = l.TryAcquireAll(ctx, []string{"full/a", "full/b", "full/c"}, ttl)
	if !errors.Is(err, pglock.ErrLockTableFull) || !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("TryAcquireAll with a full lock table: %v, want ErrLockTableFull", err)
	}
	if err := h.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend of a held grant while the lock table is full: %v", err)
	}
	// A blocking Acquire retries, and gets the key once locks are freed.
	got := make(chan error, 1)
	go func() {
		h2, err := lock.Acquire(ctx, l, "full/new", ttl)
		if err == nil {
			err = h2.Release(ctx)
		}
		got <- err
	}()
	if _, err := filler.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire after the lock table was freed: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release of the grant held throughout: %v", err)
	}
}

// Acquire draws no transaction id: 1,000 acquire+release cycles add fewer
// than 100 WAL records (the token sequence logs one record per 32 values).
func TestAcquireWritesLittleWAL(t *testing.T) {
	srv := testenv.NewPostgres(t)
	admin := connect(t, srv.DSN())
	ctx := ctxFor(t, 2*time.Minute)
	key := "wal/" + t.Name()
	// sessionsGone waits until only admin is connected, so that every
	// other backend has flushed its WAL statistics (backends flush them
	// when they exit).
	sessionsGone := func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d sessions still connected", n)
			}
			<-time.After(10 * time.Millisecond) // bounded poll of a server condition
		}
	}
	walRecords := func() int64 {
		sessionsGone()
		var n int64
		if _, err := admin.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		if err := admin.QueryRow(ctx, "SELECT wal_records FROM pg_stat_wal").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Setup (the sequence and the key-name table) is a one-time write.
	warm, err := pglock.NewFromDSN(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if h, err := warm.TryAcquire(ctx, key, time.Minute); err != nil {
		t.Fatal(err)
	} else {
		_ = h.Release(ctx)
	}
	_ = warm.Close()

	before := walRecords()
	l, err := pglock.NewFromDSN(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = l.Close()
	after := walRecords()
	t.Logf("1,000 acquire+release cycles: %d WAL records", after-before)
	if after-before >= 100 {
		t.Fatalf("1,000 acquires added %d WAL records, want fewer than 100", after-before)
	}
}

// A holder that lets its grants expire instead of releasing them (timers
// do that with tick claims) must not keep their pool connections: once a
// grant's ttl has passed, its connection is closed and the pool serves
// new grants. Regression test: without it the ninth grant on a pool of
// four connections waited forever.
func TestExpiredGrantsFreeTheirConnections(t *testing.T) {
	ctx := t.Context()
	l, err := pglock.NewFromDSN(ctx, testenv.Postgres(t).DSN()+"&pool_max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	start := time.Now()
	var abandoned []lock.Handle
	for i := range 9 {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := l.TryAcquire(actx, fmt.Sprintf("abandoned/%d", i), 200*time.Millisecond)
		cancel()
		if err != nil {
			t.Fatalf("grant %d (pool of 4, earlier grants left to expire): %v", i, err)
		}
		abandoned = append(abandoned, h) // never released
	}
	t.Logf("9 grants on a pool of 4 in %v", time.Since(start).Round(time.Millisecond))
	if err := abandoned[0].Release(ctx); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Release of an expired grant: %v, want ErrLost", err)
	}
}

// The quarantine of a server incarnation lasts until the end of the last
// grant any earlier incarnation may have made, each counted from the first
// sighting of the incarnation after it: an incarnation two restarts back
// with a long ttl outlasts the last one's short ttl. A queued acquire waits
// for the end; a try is refused with the time left.
func TestQuarantineCountsEveryEarlierIncarnation(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := connect(t, srv.DSN())
	schema := fmt.Sprintf("quarantine_%d", time.Now().UnixNano())
	ctx := ctxFor(t, 30*time.Second)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	l := newLock(t, srv.DSN(), pglock.WithSchema(schema), pglock.WithNamespace(schema))
	if err := l.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	// Two earlier incarnations: one first seen 4 s ago that granted up to
	// 5 s, one first seen 2 s ago that granted up to 500 ms. The first's
	// grants end by 2 s ago + 5 s = 3 s from now; the second's by the
	// first sighting of this one (now) + 500 ms.
	start := time.Now()
	if _, err := admin.Exec(ctx, `INSERT INTO `+schema+`.leasehold_incarnations (started, first_seen, ttl_ms) VALUES
		('2000-01-01', clock_timestamp() - interval '4 seconds', 5000),
		('2000-01-02', clock_timestamp() - interval '2 seconds', 500)`); err != nil {
		t.Fatal(err)
	}
	_, err := l.TryAcquire(ctx, "q", time.Second)
	var na *lock.NotAcquiredError
	if !errors.As(err, &na) || !errors.Is(err, pglock.ErrQuarantined) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire in the quarantine: %v, want ErrQuarantined, a *lock.NotAcquiredError", err)
	}
	t.Log(err)
	if limit := 3*time.Second + 100*time.Millisecond; na.Remaining <= time.Second || na.Remaining > limit {
		t.Fatalf("TryAcquire in the quarantine: %v left, want over 1 s (the incarnation two back) and at most %v", na.Remaining, limit)
	}
	h, err := l.AcquireQueued(ctx, "q", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	if waited := time.Since(start); waited < 3*time.Second {
		t.Fatalf("AcquireQueued granted %v after the rows were written, before the quarantine's end at 3 s", waited)
	}
}

// WithoutQuarantine: a Lock that opts out grants at once on an
// incarnation that a Lock with the quarantine refuses.
func TestWithoutQuarantine(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := connect(t, srv.DSN())
	schema := fmt.Sprintf("no_quarantine_%d", time.Now().UnixNano())
	ctx := ctxFor(t, 30*time.Second)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	with := newLock(t, srv.DSN(), pglock.WithSchema(schema), pglock.WithNamespace(schema))
	without := newLock(t, srv.DSN(), pglock.WithSchema(schema), pglock.WithNamespace(schema), pglock.WithoutQuarantine())
	if err := with.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	// An earlier incarnation, first seen just now, that granted up to a
	// minute: the current one is quarantined for about a minute.
	if _, err := admin.Exec(ctx, `INSERT INTO `+schema+`.leasehold_incarnations (started, first_seen, ttl_ms)
		VALUES ('2000-01-01', clock_timestamp() - interval '1 second', 60000)`); err != nil {
		t.Fatal(err)
	}
	if _, err := with.TryAcquire(ctx, "k", time.Second); !errors.Is(err, pglock.ErrQuarantined) {
		t.Fatalf("TryAcquire with the quarantine: %v, want ErrQuarantined", err)
	}
	h, err := without.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire WithoutQuarantine: %v", err)
	}
	_ = h.Release(ctx)
}
