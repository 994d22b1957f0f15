package pglock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

const (
	// DefaultNamespace is the namespace of a Lock without WithNamespace.
	DefaultNamespace = "leasehold"
	// MinTTL is the smallest ttl; ttls are whole milliseconds (rounded up),
	// the unit of idle_session_timeout.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the largest ttl idle_session_timeout can hold.
	MaxTTL = math.MaxInt32 * time.Millisecond
	// MaxKeys is the most keys of one TryAcquireAny or Subscribe call
	// (lock.MaxKeys).
	MaxKeys = lock.MaxKeys
	// DefaultMaxConns is the pool size NewFromDSN uses unless the DSN sets
	// pool_max_conns: every held grant keeps one connection.
	DefaultMaxConns = 64
)

var (
	// ErrPooler: the connection reaches PostgreSQL through a pooler
	// (PgBouncer, Pgpool, a cloud proxy) that does not pin one server
	// session to it, so a session advisory lock taken in one statement may
	// be on another client's session by the next. TryAcquire refuses such
	// a connection. It matches lock.ErrInvalidArgument: it is a
	// configuration error, and Acquire does not retry it.
	ErrPooler error = &configError{"pglock: the connection goes through a pooler, not a dedicated PostgreSQL session"}

	// ErrLockTableFull: the server's shared lock table is full (SQLSTATE
	// 53200, sized by max_locks_per_transaction × max_connections). It also
	// matches lock.ErrUnavailable, so Acquire retries until locks are freed.
	ErrLockTableFull = errors.New("pglock: the server's lock table is full (raise max_locks_per_transaction)")

	// ErrQuarantined: the server restarted or failed over, forgetting its
	// advisory locks, and grants nothing until every grant it may have
	// forgotten has expired (see the package documentation). The error
	// also matches lock.ErrNotAcquired and is a *lock.NotAcquiredError
	// whose Remaining is the time left, so lock.Acquire waits that long.
	ErrQuarantined = errors.New("pglock: quarantine after a restart or failover of the server")
)

type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == lock.ErrInvalidArgument }

// Lock is a lock.Lock on PostgreSQL session advisory locks. It is safe for
// concurrent use; share one per process and Close it at the end.
type Lock struct {
	pool      *pgxpool.Pool
	ownsPool  bool
	namespace string
	channel   string
	owner     string
	appOwner  string // the owner as application_name can hold it
	pooled    bool
	schema    string
	noQuar    bool // WithoutQuarantine
	log       *slog.Logger
	metrics   *backendkit.BackendMetrics

	setupMu  sync.Mutex
	setupOK  atomic.Bool
	built    bool // sql and the ttl setting are set (once: readers do not lock)
	sql      statements
	ttlGUC   string // idle_session_timeout, or a placeholder before 14
	ttlReset string // its value outside grants

	preparedKey string // where a connection keeps the statements it prepared for this schema

	// The arguments every grant passes, as text (see acquireOne).
	ttlGUCText, ttlResetText, pooledText, ownerText, channelText []byte

	namesMu sync.Mutex
	names   map[int64]struct{} // ids whose key names this instance registered

	inc incarnations // the server incarnations seen (quarantine.go)

	heldMu  sync.Mutex
	held    map[*handle]struct{}
	batches map[*batch]struct{}
	closed  bool

	batchSessions int // WithBatchSessions

	reap reaper // frees the connections of grants left to expire

	notifier backendkit.Notifier
	listener listener
}

var (
	_ lock.Lock       = (*Lock)(nil)
	_ lock.Waiter     = (*Lock)(nil)
	_ lock.MultiLock  = (*Lock)(nil)
	_ lock.Queue      = (*Lock)(nil)
	_ lock.Inspector  = (*Lock)(nil)
	_ lock.Owned      = (*Lock)(nil)
	_ lock.SharedLock = (*Lock)(nil)
	_ lock.GroupLock  = (*Lock)(nil)
)

// Option configures New and NewFromDSN.
type Option func(*config) error

type config struct {
	namespace    string
	schema       string
	pooled       bool
	noQuarantine bool
	sessions     int
	common       lock.Common
}

// WithCommon sets the owner identity stored with every grant (default a
// fresh lock.NewOwner; it is also the sessions' application_name) and where
// logs, metrics and spans go.
func WithCommon(c lock.Common) Option {
	return func(cfg *config) error { cfg.common = cfg.common.Merge(c); return nil }
}

// WithNamespace sets the namespace hashed with every key (default
// DefaultNamespace). Instances that should see each other's locks use the
// same namespace and database.
func WithNamespace(ns string) Option {
	return func(s *config) error {
		if ns == "" {
			return errors.New("empty namespace")
		}
		s.namespace = ns
		return nil
	}
}

// WithSchema sets the schema of the token sequence and the key-name table
// (default: none, found through the search_path).
func WithSchema(schema string) Option {
	return func(s *config) error {
		if !validSchema(schema) {
			return fmt.Errorf("schema %q: want a plain identifier", schema)
		}
		s.schema = schema
		return nil
	}
}

// WithSessionPooler says that the pool's connections go through a pooler
// in session mode (PgBouncer pool_mode=session), which pins one server
// session to each client connection for its whole life. Without it,
// TryAcquire refuses any connection whose server session is not the one
// the client was told at connect time (ErrPooler). Extend still checks that
// the lock is held by the session it was taken on.
func WithSessionPooler() Option {
	return func(s *config) error {
		s.pooled = true
		return nil
	}
}

// WithoutQuarantine turns the quarantine after a restart or failover of
// the server off: the restarted server, or the promoted standby, grants
// at once, possibly before the ValidUntil of holders whose grants it
// forgot, and only fencing orders their writes (as after a reset
// connection). It saves the wait (the longest ttl granted before the
// restart, for every key) and the ttls' recording. Every Lock on one
// database should agree: one that does not record its ttls is not waited
// for by the others' quarantine.
func WithoutQuarantine() Option {
	return func(s *config) error {
		s.noQuarantine = true
		return nil
	}
}

// WithBatchSessions sets how many server sessions (pooled connections) a
// Batch spreads its grants over, at most (default DefaultBatchSessions, 4;
// 1 to 64). Each session holds its share of the batch's advisory locks;
// see NewBatch.
func WithBatchSessions(n int) Option {
	return func(s *config) error {
		if n < 1 || n > 64 {
			return fmt.Errorf("batch sessions %d: want 1 to 64", n)
		}
		s.sessions = n
		return nil
	}
}

// New returns a Lock over pool. Each held grant keeps one of the pool's
// connections until it is released, so size the pool (MaxConns) for the
// grants a process holds at once plus one for waiting; a pool of its own is
// best, since a connection comes back with application_name set to the
// owner. New sends nothing: the first operation checks the server, and
// creates the token sequence and key-name table if they are missing
// (see Setup).
func New(pool *pgxpool.Pool, opts ...Option) (*Lock, error) {
	if pool == nil {
		return nil, backendkit.Invalid("pglock", "nil pool")
	}
	s := &config{namespace: DefaultNamespace, sessions: DefaultBatchSessions}
	if err := backendkit.Apply("pglock", s, opts); err != nil {
		return nil, err
	}
	cfg, err := backendkit.Resolve("pglock", s.common, "")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(s.namespace))
	l := &Lock{
		pool:      pool,
		namespace: s.namespace,
		channel:   "leasehold_" + hex.EncodeToString(sum[:8]),
		owner:     cfg.Owner,
		appOwner:  appName(cfg.Owner),
		pooled:    s.pooled,
		schema:    s.schema,
		noQuar:    s.noQuarantine,
		log:       cfg.Logger,
		metrics:   backendkit.NewTelemetry(cfg).Backend("pglock"),
		names:     map[int64]struct{}{},
		held:      map[*handle]struct{}{},
		batches:   map[*batch]struct{}{},

		batchSessions: s.sessions,
	}
	l.preparedKey = customKey + l.schema
	l.pooledText = []byte(strconv.FormatBool(l.pooled))
	l.ownerText = []byte(l.appOwner)
	l.channelText = []byte(l.channel)
	l.listener.l = l
	l.reap.timer = time.AfterFunc(time.Hour, l.sweep)
	l.reap.timer.Stop()
	return l, nil
}

// NewFromDSN makes a pool from dsn (pgxpool syntax; pool_max_conns defaults
// to DefaultMaxConns here) and returns a Lock over it. Close closes the pool.
//
// Its sessions run with plan_cache_mode=force_generic_plan (set when
// pglock first uses a connection): the server then plans each prepared
// statement once per session. Left to choose, it plans the acquire
// statement anew on every run, which costs about as much as the rest of
// the acquire. A pool passed to New is left as it is: give its sessions
// the same setting if nothing else that runs on them minds.
func NewFromDSN(ctx context.Context, dsn string, opts ...Option) (*Lock, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, backendkit.Invalid("pglock", "%w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		pcfg.MaxConns = DefaultMaxConns
	}

	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, backendkit.Unavailable("pglock: connect", err)
	}
	l, err := New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	l.ownsPool = true
	return l, nil
}

// Owner is this instance's owner identity, shown by Inspect and List.
func (l *Lock) Owner() string { return l.owner }

// limits are the bounds of every Lock's input.
var limits = lock.Limits{MinTTL: MinTTL, MaxTTL: MaxTTL, MaxKeys: MaxKeys, MaxGroupKeys: MaxGroupKeys}

// Limits implements lock.Limited: MinTTL, MaxTTL and MaxKeys.
func (l *Lock) Limits() lock.Limits { return limits }

// appName is owner as the server keeps it in application_name: printable
// ASCII only (the server turns anything else into '?'), and short enough
// that "<token> <ttl> " fits before it in 63 bytes (longer owners are cut).
func appName(owner string) string {
	b := []byte(owner)
	for i, c := range b {
		if c < 32 || c > 126 {
			b[i] = '?'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}

// ID returns the 64-bit advisory lock id of key in namespace: the first 8
// bytes of SHA-256(namespace, 0, key). Tools outside Go can compute it to
// find a key in pg_locks.
func ID(namespace, key string) int64 {
	h := sha256.New()
	h.Write([]byte(namespace))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return int64(binary.BigEndian.Uint64(h.Sum(sum[:0])))
}

func (l *Lock) id(key string) int64 { return ID(l.namespace, key) }

// overdueRetry is the hint of a refusal by a holder whose ttl has run out
// while its session still lives: the server ends it at any moment (its
// idle_session_timeout fires late under load), so the waiter tries again
// soon rather than waiting for a release that a crashed holder never
// sends.
const overdueRetry = 10 * time.Millisecond

// heldFor is the remaining ttl a refusal reports, from the holders'
// shortest remaining ms: overdueRetry for one that is overdue (0).
func heldFor(ms int64) time.Duration {
	if ms <= 0 {
		return overdueRetry
	}
	return backendkit.RemainingMillis(ms)
}

// Setup creates the token sequence and the key-name table if they are
// missing. The first operation of a Lock does it by itself; call it (or run
// its statements, see the package documentation) once with a role that may
// create them when the application's role may not.
func (l *Lock) Setup(ctx context.Context) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	l.setupMu.Lock()
	defer l.setupMu.Unlock()
	return l.setup(ctx, true)
}

// ensureSetup runs setup once per Lock (again after a failure).
func (l *Lock) ensureSetup(ctx context.Context) error {
	if l.setupOK.Load() {
		return nil
	}
	l.setupMu.Lock()
	defer l.setupMu.Unlock()
	if l.setupOK.Load() {
		return nil
	}
	return l.setup(ctx, false)
}

func (l *Lock) setup(ctx context.Context, create bool) error {
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return backendkit.Unavailable("pglock: setup", err)
	}
	defer c.Release()
	probe := buildStatements(l.schema, 0)
	var (
		version int
		idle    *string
		exists  bool
	)
	if err := c.QueryRow(ctx, probe.setupCheck).Scan(&version, &idle, &exists); err != nil {
		if perr := poolerError(err); perr != nil {
			return perr
		}
		return backendkit.Unavailable("pglock: setup", err)
	}
	if create || !exists {
		for _, stmt := range probe.setup {
			// Concurrent CREATE ... IF NOT EXISTS can still collide in the
			// catalogs (23505, 42P07, and 42710 on a table's row type),
			// and CREATE FUNCTION finds it made (42723): the object exists
			// then. The commit
			// is synchronous: a sequence lost in a crash would restart the
			// tokens.
			err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, stmt)
				return err
			})
			if err != nil && !isCode(err, "23505", "42P07", "42710", "42723") {
				return backendkit.Unavailable("pglock: setup: "+stmt, err)
			}
		}
	}
	if !l.built {
		l.sql = buildStatements(l.schema, version/10000)
		l.ttlGUC, l.ttlReset = "leasehold.ttl", "0"
		if idle != nil { // PostgreSQL 14 and later
			l.ttlGUC, l.ttlReset = "idle_session_timeout", *idle
		} else {
			l.log.Warn("leasehold: pglock: this PostgreSQL has no idle_session_timeout (before 14): the server does not enforce ttls; see the package documentation", "server_version_num", version)
		}
		l.ttlGUCText, l.ttlResetText = []byte(l.ttlGUC), []byte(l.ttlReset)
		l.built = true
	}
	l.setupOK.Store(true)
	return nil
}

// poolerError recognises what a transaction-mode pooler does to the
// prepared statements pgx keeps per connection: a statement prepared in one
// server session is unknown in the next (26000), or one prepared by another
// client is already there (42P05).
func poolerError(err error) error {
	if !isCode(err, "26000", "42P05") {
		return nil
	}
	return fmt.Errorf("%w: the server session does not match the prepared statements of this connection: "+
		"a pooler in transaction mode sits in between; connect to PostgreSQL directly: %w", ErrPooler, err)
}

func isCode(err error, codes ...string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	for _, c := range codes {
		if pgErr.Code == c {
			return true
		}
	}
	return false
}

func ms(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// TryAcquire implements lock.Lock in one round trip on a connection of its
// own, which the grant keeps until Release. Refused because the key is
// held shared, it holds new shared grants off for lock.IntentTTL (see
// TryAcquireShared).
func (l *Lock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	return l.acquireOne(ctx, key, ttl, try)
}

// AcquireQueued implements lock.Queue: one statement waits in the server's
// queue for the key (pg_advisory_lock; waiters are served in arrival order
// and a release wakes only the next one), then draws the token and sets the
// ttl as TryAcquire does. It holds a pooled connection while it waits. When
// ctx ends, the wait is cancelled and the connection closed, so that
// nothing stays held. lock.Acquire uses it.
func (l *Lock) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return nil, err
	}
	if l.unregistered(l.id(key)) {
		// Record the key's name with a plain attempt first: a statement
		// that waits must not hold an uncommitted insert that another
		// instance's attempt on the same name would block on.
		h, err := l.acquireOne(ctx, key, ttl, try)
		if !errors.Is(err, lock.ErrNotAcquired) {
			return h, err
		}
	}
	return l.acquireOne(ctx, key, ttl, queued)
}

// Waiting implements lock.Queue: the sessions waiting in the server's
// queue for key's advisory lock (pg_locks, not granted), in one round trip.
func (l *Lock) Waiting(ctx context.Context, key string) (int, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return 0, err
	}
	if err := l.ensureSetup(ctx); err != nil {
		return 0, err
	}
	var n int
	if err := l.pool.QueryRow(ctx, l.sql.waiting, l.id(key)).Scan(&n); err != nil {
		return 0, backendkit.Unavailable("pglock: waiting", err)
	}
	return n, nil
}

// TryAcquireAny implements lock.MultiLock: one statement tries the keys in
// turn from a random offset and takes the first free one.
func (l *Lock) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (h lock.Handle, err error) {
	if err := backendkit.ValidateKeys(ctx, keys, ttl, limits); err != nil {
		return nil, err
	}
	if len(keys) == 1 {
		return l.acquireOne(ctx, keys[0], ttl, try)
	}
	off := rand.N(len(keys))
	keys = append(append([]string(nil), keys[off:]...), keys[:off]...)
	start := time.Now()
	defer func() { l.metrics.Attempt(ctx, start, err) }()
	if err := l.ensureSetup(ctx); err != nil {
		return nil, err
	}
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = l.id(k)
	}
	c, err := l.conn(ctx, keys, ttl, false)
	if err != nil {
		return nil, err
	}
	hd := &handle{l: l}
	expect := int32(c.Conn().PgConn().PID())
	hd.setTTL(ttl)
	sql, args := l.sql.acquire[1], []any{ids, expect, l.pooled, l.ttlGUC, string(hd.ttlText), l.appOwner}
	register := l.unregistered(ids...)
	if register {
		names := make([][]byte, len(keys))
		for i, k := range keys {
			names[i] = []byte(k)
		}
		sql, args = l.sql.acquireRegister[1], append(args, names, l.namespace)
	}
	var pid int32
	var res []byte
	sent := time.Now()
	err = c.QueryRow(ctx, sql, args...).Scan(&pid, &res)
	if err == nil && register {
		l.registered(ids...)
	}
	return l.granted(ctx, hd, c, keys, ids, sent, expect, pid, res, err)
}

// mode is how acquireOne takes its key.
type mode int

const (
	try    mode = iota // exclusive, if free (TryAcquire)
	queued             // exclusive, waiting in the server's queue (AcquireQueued)
	shared             // shared, if no writer holds or waits (TryAcquireShared)
)

// acquireOne takes one key, trying (TryAcquire, TryAcquireShared) or
// waiting in the server's queue, in one round trip: the statement is
// prepared on the connection and its arguments are text built once into
// the grant, so that the hot path goes through pgconn without pgx's
// encoding and scanning.
func (l *Lock) acquireOne(ctx context.Context, key string, ttl time.Duration, m mode) (h lock.Handle, err error) {
	start := time.Now()
	defer func() { l.metrics.Attempt(ctx, start, err) }()
	if err := l.ensureSetup(ctx); err != nil {
		return nil, err
	}
	id := l.id(key)
	keys := []string{key}
	c, err := l.conn(ctx, keys, ttl, m == queued)
	if err != nil {
		return nil, err
	}
	hd := &handle{l: l, key: key, id: id, shared: m == shared}
	pg := c.Conn().PgConn()
	expect := int32(pg.PID())
	hd.build(expect)
	hd.setTTL(ttl)
	var (
		pid int32
		res []byte
	)
	sent := time.Now()
	if m != queued && l.unregistered(id) {
		// The first attempt on a key records its name (List), through pgx.
		sql := l.sql.acquireRegister[0]
		if m == shared {
			sql = l.sql.shared[1]
		}
		err = c.QueryRow(ctx, sql, id, expect, l.pooled, l.ttlGUC, string(hd.ttlText), l.appOwner,
			[]byte(key), l.namespace).Scan(&pid, &res)
		if err == nil {
			l.registered(id)
		}
	} else {
		p := l.preparedOf(c)
		stmt := [...]*pgconn.StatementDescription{try: p.acquire, queued: p.queued, shared: p.shared}[m]
		args := [...][]byte{hd.idText, hd.pidText, l.pooledText, l.ttlGUCText, hd.ttlText, l.ownerText}
		var cols [2][]byte
		err = exec(ctx, pg, stmt, args[:], cols[:], hd.reply())
		if err == nil {
			pid, res = parsePID(cols[0]), cols[1]
		}
	}
	return l.granted(ctx, hd, c, keys, []int64{id}, sent, expect, pid, res, err)
}

// granted reads the reply of an acquire statement (see buildStatements)
// and hands the grant out, or gives the connection back.
func (l *Lock) granted(ctx context.Context, hd *handle, c *pgxpool.Conn, keys []string, ids []int64, sent time.Time,
	expect, pid int32, res []byte, err error) (lock.Handle, error) {
	switch {
	case err != nil:
		return nil, l.failed(c, keys[0], err)
	case pid != expect && !l.pooled:
		c.Release()
		return nil, poolerMismatch(pid, expect)
	case len(res) > 0 && res[0] == 'h':
		c.Release()
		var rem time.Duration
		if ms, err := strconv.ParseInt(string(res[1:]), 10, 64); err == nil {
			rem = heldFor(ms)
		}
		return nil, backendkit.NotAcquiredAny(keys, rem)
	}
	idx, ran, app, ok := parseGrantReply(res)
	if !ok || idx < 1 || idx > len(keys) {
		destroy(c)
		return nil, backendkit.Unavailable("pglock: acquire", fmt.Errorf("unexpected reply %q", res))
	}
	if hd.idText == nil || ids[idx-1] != hd.id || pid != expect { // TryAcquireAny, or a session pooler
		hd.key, hd.id = keys[idx-1], ids[idx-1]
		hd.build(pid)
	}
	if !hd.setApp(app) {
		destroy(c)
		return nil, backendkit.Unavailable("pglock: acquire", fmt.Errorf("unexpected application_name %q", app))
	}
	return l.handOut(hd, c, pid, sent, ran)
}

// handOut makes hd, granted on c's session pid by a statement sent at sent
// that ran ran µs before the grant, the holder's: tracked, reaped if left
// to expire, and delivered unless its reply came too late.
func (l *Lock) handOut(hd *handle, c *pgxpool.Conn, pid int32, sent time.Time, ran int64) (lock.Handle, error) {
	hd.pid, hd.conn = pid, c
	hd.validUntil = backendkit.ValidUntil(sent.Add(time.Duration(ran)*time.Microsecond), hd.ttl)
	if !l.track(hd) {
		hd.end()
		return nil, backendkit.Invalid("pglock", "Lock is closed")
	}
	l.reap.arm(hd.validUntil.Add(abandonGrace))
	return backendkit.Deliver(hd, nil)
}

// failed ends c's session after an acquire statement failed with err (it
// may have taken locks before failing, so that nothing stays behind) and
// returns the error to report for key.
func (l *Lock) failed(c *pgxpool.Conn, key string, err error) error {
	destroy(c)
	return l.acquireErr(key, err)
}

// acquireErr is the error to report for key after an acquire statement
// failed with err.
func (l *Lock) acquireErr(key string, err error) error {
	if perr := poolerError(err); perr != nil {
		return perr
	}
	if isCode(err, "53200") {
		return fmt.Errorf("%w: %w: acquire %q: %w", lock.ErrUnavailable, ErrLockTableFull, key, err)
	}
	if isCode(err, "42P01", "42704", "42883") { // the sequence, table or function was dropped
		l.setupMu.Lock()
		l.setupOK.Store(false)
		l.setupMu.Unlock()
	}
	return backendkit.Unavailable("pglock: acquire", err)
}

// poolerMismatch is the error of an acquire statement answered by another
// server session than the connection was opened for.
func poolerMismatch(pid, expect int32) error {
	return fmt.Errorf("%w: the server session answering is pid %d, the connection was opened for pid %d: "+
		"a pooler sits in between, and unless it pins the session (PgBouncer pool_mode=session, then use "+
		"pglock.WithSessionPooler) a session advisory lock would not stay with this connection; connect to "+
		"PostgreSQL directly", ErrPooler, pid, expect)
}

// parseGrantReply splits "<idx> <µs> <application_name>".
func parseGrantReply(res []byte) (idx int, ran int64, app []byte, ok bool) {
	i := bytes.IndexByte(res, ' ')
	if i < 0 {
		return 0, 0, nil, false
	}
	j := bytes.IndexByte(res[i+1:], ' ')
	if j < 0 {
		return 0, 0, nil, false
	}
	n, err1 := strconv.Atoi(string(res[:i]))
	ran, err2 := strconv.ParseInt(string(res[i+1:i+1+j]), 10, 64)
	return n, max(ran, 0), res[i+2+j:], err1 == nil && err2 == nil
}

func parsePID(b []byte) int32 {
	n, _ := strconv.ParseInt(string(b), 10, 32)
	return int32(n)
}

// exec runs the prepared statement sd with text arguments and copies the
// columns of its row into cols (nil for NULL), appending them to buf; with
// a nil buf it tells NULL from the rest only, with empty columns.
func exec(ctx context.Context, pg *pgconn.PgConn, sd *pgconn.StatementDescription, args, cols [][]byte, buf []byte) error {
	rr := pg.ExecStatement(ctx, sd, args, nil, nil)
	for rr.NextRow() {
		for i, v := range rr.Values() {
			if i >= len(cols) {
				break
			}
			if v == nil || buf == nil {
				cols[i] = v[:0:0]
				continue
			}
			n := len(buf)
			buf = append(buf, v...)
			cols[i] = buf[n:len(buf):len(buf)]
		}
	}
	_, err := rr.Close()
	return err
}

// conn returns a prepared connection on which ttl may be granted now: out
// of its server incarnation's quarantine (see quarantine.go). While the
// quarantine runs, a queued acquire waits for its end and other attempts
// fail with lock.ErrNotAcquired, retry after its end.
func (l *Lock) conn(ctx context.Context, keys []string, ttl time.Duration, queued bool) (*pgxpool.Conn, error) {
	for {
		c, err := l.pool.Acquire(ctx)
		if err != nil {
			return nil, backendkit.Unavailable("pglock: acquire: getting a connection", err)
		}
		if err := l.prepare(ctx, c); err != nil {
			destroy(c)
			return nil, err
		}
		wait, err := l.quarantine(ctx, c, ttl)
		if err != nil {
			destroy(c)
			if perr := poolerError(err); perr != nil {
				return nil, perr
			}
			return nil, backendkit.Unavailable("pglock: acquire: recording the ttl for the server", err)
		}
		if wait == 0 {
			return c, nil
		}
		c.Release()
		if !queued {
			na, _ := backendkit.NotAcquiredAny(keys, wait).(*lock.NotAcquiredError)
			return nil, &quarantinedError{na}
		}
		if err := backendkit.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// prepare sets a connection up the first time this package uses it:
// synchronous_commit on for the session, so that the commit of a statement
// whose nextval wrote WAL (once per 32 tokens) waits for the flush, and a
// token is never handed out twice after a crash. It also prepares the
// statements of the hot paths, so that none of them pays a round trip to
// be prepared when it first runs on this connection: a waiter woken by a
// release retries with the statement that skips key registration, which
// its first attempt did not use, and would otherwise add that round trip
// (and the planning) to the handoff.
func (l *Lock) prepare(ctx context.Context, c *pgxpool.Conn) error {
	data := c.Conn().PgConn().CustomData()
	if data[l.preparedKey] != nil {
		return nil
	}
	fail := func(err error) error {
		if perr := poolerError(err); perr != nil {
			return perr
		}
		return backendkit.Unavailable("pglock: preparing a connection", err)
	}
	// The postmaster's start time tells the server incarnation apart (see
	// quarantine.go).
	setup := "SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::int8, set_config('synchronous_commit', 'on', false)"
	if l.ownsPool { // see NewFromDSN
		setup += " || set_config('plan_cache_mode', 'force_generic_plan', false)"
	}
	var started int64
	if err := c.QueryRow(ctx, setup).Scan(&started, nil); err != nil {
		return fail(err)
	}
	data[incarnationKey] = started
	p := &prepared{}
	for _, s := range []struct {
		sd  **pgconn.StatementDescription
		sql string
	}{
		{&p.acquire, l.sql.acquire[0]}, {&p.queued, l.sql.acquire[2]}, {nil, l.sql.acquireRegister[0]},
		{&p.extend, l.sql.extend}, {&p.release, l.sql.release},
		{&p.shared, l.sql.shared[0]}, {&p.releaseShared, l.sql.releaseShared},
	} {
		// Named by their text, pgx runs them as prepared when they go
		// through it (see pgx.Conn.Prepare).
		sd, err := c.Conn().Prepare(ctx, s.sql, s.sql)
		if err != nil {
			return fail(err)
		}
		if s.sd != nil {
			*s.sd = sd
		}
	}
	data[l.preparedKey] = p
	return nil
}

// customKey prefixes the CustomData key of the statements a connection has
// prepared for one schema (Lock.preparedKey): Locks with other schemas may
// share the pool.
const customKey = "leasehold/pglock/prepared/"

// prepared are the statements of the hot paths as prepared on one
// connection.
type prepared struct {
	acquire, queued, extend, release *pgconn.StatementDescription
	shared, releaseShared            *pgconn.StatementDescription
}

// preparedOf returns the statements prepared on c by Lock.prepare.
func (l *Lock) preparedOf(c *pgxpool.Conn) *prepared {
	p, _ := c.Conn().PgConn().CustomData()[l.preparedKey].(*prepared)
	return p
}

// unregistered reports whether some of ids have no key name recorded by
// this instance yet. The names table is written once per key and
// instance, for List; the hot path does not write.
func (l *Lock) unregistered(ids ...int64) bool {
	l.namesMu.Lock()
	defer l.namesMu.Unlock()
	for _, id := range ids {
		if _, ok := l.names[id]; !ok {
			return true
		}
	}
	return false
}

func (l *Lock) registered(ids ...int64) {
	l.namesMu.Lock()
	defer l.namesMu.Unlock()
	if len(l.names) > 100_000 { // bound the memory of processes with endless distinct keys
		clear(l.names)
	}
	for _, id := range ids {
		l.names[id] = struct{}{}
	}
}

func (l *Lock) track(h *handle) bool {
	l.heldMu.Lock()
	defer l.heldMu.Unlock()
	if l.closed {
		return false
	}
	l.held[h] = struct{}{}
	return true
}

// reaper is one timer per Lock, due at the earliest moment a held grant
// may have been left to expire: a holder that lets its grant lapse instead
// of releasing it (a timer's tick claims do that on purpose) gets its
// session closed and its connection out of the pool, as the server's
// idle_session_timeout would end the session anyway, but without the
// client's pool slot staying checked out forever. A grant costs a
// comparison under a mutex, not a timer of its own.
type reaper struct {
	mu     sync.Mutex
	timer  *time.Timer
	at     time.Time // when the timer fires; zero when it is not armed
	closed bool
}

// arm makes the timer fire by at.
func (r *reaper) arm(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || (!r.at.IsZero() && !at.Before(r.at)) {
		return
	}
	r.timer.Reset(time.Until(at))
	r.at = at
}

// fired marks the timer unarmed: an arm from now on sets it again.
func (r *reaper) fired() {
	r.mu.Lock()
	r.at = time.Time{}
	r.mu.Unlock()
}

func (r *reaper) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.timer.Stop()
}

// sweep ends the grants whose ttl passed without a renewal, and arms the
// reaper for the next that may.
func (l *Lock) sweep() {
	l.reap.fired() // before the snapshot: a grant tracked after it arms the timer itself
	l.heldMu.Lock()
	held := make([]*handle, 0, len(l.held))
	for h := range l.held {
		held = append(held, h)
	}
	l.heldMu.Unlock()
	var next time.Time
	now := time.Now()
	for _, h := range held {
		if due := h.abandoned(now); !due.IsZero() && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	if !next.IsZero() {
		l.reap.arm(next)
	}
}

func (l *Lock) untrack(h *handle) {
	l.heldMu.Lock()
	defer l.heldMu.Unlock()
	delete(l.held, h)
}

// destroy closes a pooled connection's session and takes it out of the
// pool: whatever the session held is released by the server.
func destroy(c *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Conn().Close(ctx)
	c.Release() // a closed connection is dropped, not pooled
}

// Close ends the waiting connection and every grant this Lock still holds
// (their sessions are closed, so the server frees their locks at once),
// its Batches, and, for a Lock from NewFromDSN, closes the pool.
func (l *Lock) Close() error {
	l.heldMu.Lock()
	l.closed = true
	held := make([]*handle, 0, len(l.held))
	for h := range l.held {
		held = append(held, h)
	}
	batches := make([]*batch, 0, len(l.batches))
	for b := range l.batches {
		batches = append(batches, b)
	}
	l.heldMu.Unlock()
	for _, h := range held {
		h.abandon()
	}
	for _, b := range batches {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = b.Close(ctx)
		cancel()
	}
	l.reap.close()
	l.listener.close()
	l.notifier.NotifyAll()
	if l.ownsPool {
		l.pool.Close()
	}
	return nil
}
