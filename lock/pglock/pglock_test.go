package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
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
func newLock(t testing.TB, dsn string, opts ...pglock.Option) *pglock.Lock {
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

// waitingFor polls pg_locks until n sessions wait for an advisory lock.
func waitingFor(t *testing.T, ctx context.Context, c *pgx.Conn, n int) {
	t.Helper()
	for {
		var got int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		if err := backendkit.Sleep(ctx, 5*time.Millisecond); err != nil {
			t.Fatalf("%d waiters in pg_locks, want %d: %v", got, n, err)
		}
	}
}

// lock.Acquire on pglock waits in the server's queue: waiters are served
// in arrival order, one release wakes one waiter, a cancelled waiter
// leaves nothing behind, and a grant after a long wait is valid for its
// ttl from the grant, not from the request.
func TestAcquireQueued(t *testing.T) {
	srv := testenv.NewPostgres(t)
	ctx := ctxFor(t, 30*time.Second)
	obs := connect(t, srv.DSN())
	l := newLock(t, srv.DSN())
	const key, ttl = "queued", 5 * time.Second
	h, err := l.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		i int
		h lock.Handle
	}
	got := make(chan result, 3)
	cancelled := make(chan error, 1)
	cctx, cancel := context.WithCancel(ctx)
	for i := range 3 {
		wctx := ctx
		if i == 1 {
			wctx = cctx // the second waiter gives up
		}
		wl := newLock(t, srv.DSN())
		go func() {
			h, err := lock.Acquire(wctx, wl, key, ttl)
			if i == 1 {
				cancelled <- err
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			got <- result{i, h}
		}()
		waitingFor(t, ctx, obs, i+1)
	}
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	waitingFor(t, ctx, obs, 2)                                          // the cancelled one left the queue
	if err := backendkit.Sleep(ctx, 300*time.Millisecond); err != nil { // a long wait for the next grant
		t.Fatal(err)
	}
	released := time.Now()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-got
	if first.i != 0 {
		t.Fatalf("waiter %d served first, want 0 (arrival order)", first.i)
	}
	if vu := first.h.ValidUntil(); vu.Before(released.Add(ttl - backendkit.DriftAllowance(ttl) - 100*time.Millisecond)) {
		t.Fatalf("ValidUntil %v after the release, want about the ttl %v from the grant", vu.Sub(released), ttl)
	}
	if first.h.Token() <= h.Token() {
		t.Fatalf("token %d after %d", first.h.Token(), h.Token())
	}
	waitingFor(t, ctx, obs, 1) // one release woke one waiter
	if err := first.h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := <-got
	if last.i != 2 {
		t.Fatalf("waiter %d served, want 2", last.i)
	}
	if err := last.h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := pglock.New(nil); !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "pglock: invalid argument: ") {
		t.Errorf("New(nil): %v", err)
	}
	// Nothing connects before the first operation: the options are
	// refused without a server.
	for name, opt := range map[string]pglock.Option{
		"empty namespace": pglock.WithNamespace(""),
		"schema":          pglock.WithSchema(`a"b`),
		"nil option":      nil,
		"invalid owner":   pglock.WithCommon(lock.Common{Owner: "bad\nowner"}),
	} {
		if l, err := pglock.NewFromDSN(t.Context(), "postgres://127.0.0.1:1/none", opt); !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "pglock: invalid argument: ") {
			t.Errorf("%s: %v", name, err)
			if l != nil {
				_ = l.Close()
			}
		}
	}
}

// writeCounter counts the client's writes on its connections: each round
// trip of the extended protocol is one write (Bind, Execute, Sync).
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (w writeCounter) Write(b []byte) (int, error) { w.n.Add(1); return w.Conn.Write(b) }

// Every operation on a grant is one round trip: TryAcquire, Extend and
// Release each send one write once the connection is prepared.
func TestOneRoundTripPerOperation(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(testenv.Postgres(t).DSN())
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return writeCounter{c, &writes}, err
	}
	cfg.MaxConns = 1 // one connection, prepared by the first grant
	ctx := ctxFor(t, 30*time.Second)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l := testkit.Must(pglock.New(pool))
	key := "round-trips/" + lock.NewOwner()
	for range 2 { // the first attempt prepares and records the key's name
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	count := func(what string, op func() error) {
		t.Helper()
		before := writes.Load()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := writes.Load() - before; n != 1 {
			t.Errorf("%s: %d round trips, want 1", what, n)
		}
	}
	var h lock.Handle
	count("TryAcquire", func() (err error) { h, err = l.TryAcquire(ctx, key, time.Minute); return err })
	count("Extend", func() error { return h.Extend(ctx, time.Minute) })
	count("Release", func() error { return h.Release(ctx) })

	// Shares and groups too, once their statements are prepared.
	keys := []string{key + "/a", key + "/b", key + "/c", key + "/d"}
	for range 2 { // one connection: one grant at a time
		h, err := l.TryAcquireShared(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = h.Extend(ctx, time.Minute), h.Release(ctx)
		g, err := l.TryAcquireAll(ctx, keys, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = g.Extend(ctx, time.Minute), g.Release(ctx)
	}
	count("TryAcquireShared", func() (err error) { h, err = l.TryAcquireShared(ctx, key, time.Minute); return err })
	count("Extend of a share", func() error { return h.Extend(ctx, time.Minute) })
	count("Release of a share", func() error { return h.Release(ctx) })
	var g lock.Group
	count("TryAcquireAll", func() (err error) { g, err = l.TryAcquireAll(ctx, keys, time.Minute); return err })
	count("Group.Extend", func() error { return g.Extend(ctx, time.Minute) })
	count("Group.Release", func() error { return g.Release(ctx) })
}

// Two Locks on one pool with different schemas each draw their tokens from
// their own schema's sequence: the statements a connection has prepared
// are kept per schema, since the first Lock to use a connection prepared
// its own (with its schema's sequence) and the second ran those.
func TestSchemasShareAPool(t *testing.T) {
	srv := testenv.Postgres(t)
	admin := connect(t, srv.DSN())
	ctx := ctxFor(t, 30*time.Second)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	pool, err := pgxpool.New(ctx, withPoolSize(srv.DSN(), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for i, start := range []int64{1, 1_000_000_000} {
		schema := "shared_pool_" + stamp + "_" + strconv.Itoa(i)
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		l := testkit.Must(pglock.New(pool, pglock.WithSchema(schema)))
		if err := l.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "ALTER SEQUENCE "+schema+".leasehold_tokens RESTART WITH "+strconv.FormatInt(start, 10)); err != nil {
			t.Fatal(err)
		}
		for range 3 { // the first attempt on a key records its name; the rest are the hot path
			h, err := l.TryAcquire(ctx, "shared-pool", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if tok := h.Token(); tok < uint64(start) || tok > uint64(start)+100 {
				t.Errorf("schema %s: token %d, want one from its own sequence (from %d)", schema, tok, start)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A holder whose ttl ran out while its session still lives (the server's
// idle_session_timeout fires late on a loaded machine) is about to lose
// its lock: a refusal says to try again soon. It said 0 (unknown), and a
// waiter then slept DefaultMaxBackoff (500 ms) before trying again, past a
// crashed holder's ttl + slack (semaphore TestSuite/postgres/
// CrashedHolderFrees failed so under CI's load).
func TestOverdueHolderHintsASoonRetry(t *testing.T) {
	srv := testenv.Postgres(t)
	key := "overdue/" + lock.NewOwner()
	ghost := connect(t, srv.DSN())
	ctx := ctxFor(t, 30*time.Second)
	// A holder whose name says ttl 0, on a session without
	// idle_session_timeout: overdue for as long as the test runs.
	if _, err := ghost.Exec(ctx, "SELECT set_config('application_name', '1 0 0 ghost', false), pg_advisory_lock($1)", pglock.ID(pglock.DefaultNamespace, key)); err != nil {
		t.Fatal(err)
	}
	l := newLock(t, srv.DSN())
	_, err := l.TryAcquire(ctx, key, time.Second)
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	if hint := lock.RemainingTTL(err); hint <= 0 || hint > 50*time.Millisecond {
		t.Fatalf("refused by an overdue holder with hint %v: want a retry within 50 ms", hint)
	}
}

// The conformance suite passes on pools that prepare no statement
// (default_query_exec_mode exec and simple_protocol: pgx then sends each
// argument as the type its Go type names, or writes it into the SQL),
// connected to the server itself. pgjobs' Track failed on such pools.
func TestConformanceExecModes(t *testing.T) {
	srv := testenv.Postgres(t)
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			locktest.Run(t, func(t testing.TB) lock.Lock { return newLock(t, srv.DSN()+"&default_query_exec_mode="+mode) })
		})
	}
}

// Instances that use a set of keys for the first time at once, through
// TryAcquireAny (a semaphore's start: each rotates the keys by a random
// offset), record the key names without deadlocking: the names went in
// the rotated order, an insert waits for another transaction that
// inserted the same key, and one statement of two failed with SQLSTATE
// 40P01 after a second (deadlock_timeout), in rounds 2 to 6 of 15.
func TestFirstUsesOfAKeySetAtOnce(t *testing.T) {
	srv := testenv.Postgres(t)
	locks := make([]*pglock.Lock, 8)
	for i := range locks {
		locks[i] = newLock(t, srv.DSN())
	}
	ctx := ctxFor(t, 2*time.Minute)
	for round := range 30 {
		keys := make([]string, 256)
		for i := range keys {
			keys[i] = fmt.Sprintf("first-uses/%s/%d/%d", t.Name(), round, i)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, len(locks))
		for i, l := range locks {
			wg.Go(func() {
				<-start
				h, err := l.TryAcquireAny(ctx, keys, 10*time.Second)
				if err == nil {
					err = h.Release(ctx)
				}
				if !errors.Is(err, lock.ErrNotAcquired) {
					errs[i] = err
				}
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, instance %d: %v", round, i, err)
			}
		}
	}
}
