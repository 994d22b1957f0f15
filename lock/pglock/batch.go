package pglock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

const (
	// DefaultBatchSessions is how many server sessions a Batch spreads its
	// grants over unless WithBatchSessions says otherwise.
	DefaultBatchSessions = 4
	// batchChunk bounds the ids of one unlock statement of a batch's
	// reaper and the stale token rows one new session deletes.
	batchChunk = 1000
)

var _ lock.Batcher = (*Lock)(nil)

// NewBatch implements lock.Batcher: a Batch holds its grants as advisory
// locks on at most WithBatchSessions (default 4) server sessions of the
// pool, opened as grants come (each TryAcquire goes to the session with the
// fewest grants) and kept until Close. The sessions' idle_session_timeout
// is the grants' shared ttl: a crashed or partitioned process loses them
// all after ttl, as it would each single grant.
//
// Renew is one statement per session, the sessions' statements run side by
// side: it sets the session's timeout and reads the session's rows of
// pg_locks, so each grant it was given is reported renewed or, when its
// lock is gone, lost. A session that died (terminated, ForceRelease of any
// of its keys, connection broken) takes all of its grants with it: they
// are reported lost on their own, and the other sessions' grants go on.
// This is how one lost grant is reported alone on PostgreSQL: a grant can
// only end with its session, or by its Release.
//
// A grant's Extend is one statement on its session. Its ttl is the
// grant's, but the session's timeout is shared: the session keeps the
// longest ttl any of its grants was given until that grant's end, so an
// Extend with a ttl longer than the batch's also lengthens how long the
// session's other keys stay locked after a crash; a shorter one leaves the
// session's timeout as it is. Its Release unlocks that key alone. Grants
// whose ValidUntil passed without a renewal are unlocked by the batch, and
// their waiters woken (one timer per batch, one statement per session and
// 1,000 keys).
//
// Calls on one session are serialised (a pgx connection is not safe for
// concurrent use), each bounded by its context; a call cancelled while its
// statement runs ends that session (pgx closes the connection), and its
// grants are lost (a Renew cut short reports them unknown: they stay valid
// until their ValidUntil, the server ending the session after its ttl). Handles are not lock.LossNotifiers: the loss of a
// session shows at the next statement on it.
//
// The number of keys all sessions of a server hold is bounded by its lock
// table, and a batch holds at most as many as the table is sized for
// (max_locks_per_transaction × (max_connections +
// max_prepared_transactions), read by its first session): past that, or when the
// server's table is full sooner, TryAcquire fails with ErrLockTableFull.
// See "Many grants" in the package documentation.
func (l *Lock) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	if err := limits.CheckTTL(ttl); err != nil {
		return nil, err
	}
	if err := l.ensureSetup(ctx); err != nil {
		return nil, err
	}
	b := &batch{l: l, ttl: ttl, sessions: make([]*session, l.batchSessions)}
	b.reap.timer = time.AfterFunc(time.Hour, b.sweep)
	b.reap.timer.Stop()
	l.heldMu.Lock()
	defer l.heldMu.Unlock()
	if l.closed {
		return nil, backendkit.Invalid("pglock", "Lock is closed")
	}
	l.batches[b] = struct{}{}
	return b, nil
}

// batch is a lock.Batch: its grants are advisory locks on its sessions.
type batch struct {
	l   *Lock
	ttl time.Duration

	mu       sync.Mutex
	sessions []*session // a nil or dead slot gets a new session when picked
	closed   bool
	// table is the size of the server's lock table, the most locks the
	// batch holds (0 until its first session reads it): PostgreSQL lends a
	// full table the shared memory that new connections and other
	// sessions' queries need ("out of shared memory" when they start), so
	// filling it would break them.
	table int
	reap  reaper // the sweep of grants left to expire
}

// session is one server session of a batch. Lock order: io, then mu, then
// a handle's mu; b.mu may be taken before mu, never with io wanted.
type session struct {
	b  *batch
	io chan struct{} // held (a value in it) while the session runs a statement

	// Under io:
	conn      *pgxpool.Conn
	pid       int32
	keepUntil time.Time // the session must live until then (see timeout)
	head      string    // application_name around its ttl (see splitApp)
	tail      string

	mu      sync.Mutex
	grants  map[int64]*batchHandle
	pending int   // TryAcquire calls on their way to it
	dead    error // why the session ended, once it did
}

func (s *session) lock(ctx context.Context) error {
	select {
	case s.io <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (s *session) unlock() { <-s.io }

// load is the session's number of grants, and of grants on their way;
// a dead session counts as empty (it is replaced).
func (s *session) load() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.grants) + s.pending, s.dead == nil
}

// coming counts a TryAcquire on its way to the session (d: 1, then -1).
func (s *session) coming(d int) {
	s.mu.Lock()
	s.pending += d
	s.mu.Unlock()
}

// pick returns the session for a new grant: the live one with the fewest
// grants, or a new one in an empty or dead slot.
func (b *batch) pick() (*session, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, backendkit.Invalid("pglock", "the batch is closed")
	}
	best, bestLoad, bestLive, total := -1, 0, false, 0
	for i, s := range b.sessions {
		n, live := 0, false
		if s != nil {
			n, live = s.load()
		}
		if !live {
			n = 0
		}
		total += n
		if best < 0 || n < bestLoad {
			best, bestLoad, bestLive = i, n, live
		}
	}
	if b.table > 0 && total >= b.table {
		return nil, fmt.Errorf("%w: the batch holds %d locks, the size of the server's lock table (max_locks_per_transaction × (max_connections + max_prepared_transactions))", ErrLockTableFull, total)
	}
	if !bestLive {
		b.sessions[best] = &session{b: b, io: make(chan struct{}, 1), grants: map[int64]*batchHandle{}}
	}
	s := b.sessions[best]
	s.coming(1) // under b.mu: the next pick sees it
	return s, nil
}

// open connects the session; io is held.
func (s *session) open(ctx context.Context, key string) error {
	l := s.b.l
	c, err := l.conn(ctx, []string{key}, s.b.ttl, false)
	if err != nil {
		return err
	}
	var pid int32
	if err := c.QueryRow(ctx, l.sql.batch.clean).Scan(&pid); err != nil {
		destroy(c)
		return backendkit.Unavailable("pglock: batch: opening a session", err)
	}
	s.b.mu.Lock()
	known := s.b.table > 0
	s.b.mu.Unlock()
	if !known {
		var table int
		if err := c.QueryRow(ctx, lockTableSize).Scan(&table); err != nil {
			destroy(c)
			return backendkit.Unavailable("pglock: batch: reading the lock table's size", err)
		}
		s.b.mu.Lock()
		s.b.table = table
		s.b.mu.Unlock()
	}
	s.conn, s.pid = c, int32(c.Conn().PgConn().PID())
	if l.pooled { // a session pooler tells the client a pid of its own
		s.pid = pid
	}
	return nil
}

// die ends the session and every grant on it; io is held.
func (s *session) die(cause error) {
	if s.conn != nil {
		destroy(s.conn)
		s.conn = nil
	}
	s.mu.Lock()
	if s.dead == nil {
		s.dead = cause
	}
	grants := s.grants
	s.grants = nil
	s.mu.Unlock()
	for _, h := range grants {
		h.lose(cause)
	}
}

// drop forgets h, lost or released.
func (s *session) drop(h *batchHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grants[h.id] == h {
		delete(s.grants, h.id)
	}
}

// timeout is the session's idle_session_timeout for a statement sent at
// sent that grants or extends ttl: at least ttl and the batch's ttl, and
// long enough for every grant made before (keepUntil). io is held.
func (s *session) timeout(sent time.Time, ttl time.Duration) time.Duration {
	return min(MaxTTL, max(ttl, s.b.ttl, s.keepUntil.Sub(sent)))
}

// keep records that the session must live until sent+ttl; io is held.
func (s *session) keep(sent time.Time, ttl time.Duration) {
	if end := sent.Add(ttl); end.After(s.keepUntil) {
		s.keepUntil = end
	}
}

func (s *session) app(ttl time.Duration) string { return s.head + ms(ttl) + s.tail }

// failed handles the error of a statement on the session: a broken
// connection ends the session (all its grants) and returns true.
func (s *session) failed(err error) bool {
	if s.conn != nil && !s.conn.Conn().IsClosed() {
		return false
	}
	s.die(fmt.Errorf("the batch's session ended: %w", err))
	return true
}

// unlockIDs unlocks ids on the session, deletes their token rows and
// wakes their waiters, in statements of batchChunk ids. When a statement
// fails (a full lock table: the deletion and the notification need
// entries of it), the ids are unlocked with a statement that needs none;
// if that fails too, the session is ended, which unlocks them for sure.
// io is held.
func (s *session) unlockIDs(ctx context.Context, ids []int64) {
	for chunk := range slices.Chunk(ids, batchChunk) {
		if s.conn == nil {
			return
		}
		payloads := make([]string, len(chunk))
		for i, id := range chunk {
			payloads[i] = payload(id)
		}
		if _, err := s.conn.Exec(ctx, s.b.l.sql.batch.unlock, chunk, s.b.l.channel, payloads); err != nil && !s.failed(err) {
			s.plainUnlock(ctx, chunk)
		}
	}
}

// plainUnlock unlocks ids with a statement that takes no lock of its own
// (no table, no transaction id, no notification), so that it works while
// the server's lock table is full; on an error it ends the session. io is
// held.
func (s *session) plainUnlock(ctx context.Context, ids []int64) {
	if _, err := s.conn.Exec(ctx, s.b.l.sql.batch.plainUnlock, ids); err != nil {
		s.die(fmt.Errorf("unlocking failed, so the session was ended: %w", err))
	}
}

// undo unlocks id after a statement that may have taken it failed, for
// at most a second beyond ctx; io is held. Nobody was told of the grant:
// the unlock needs no notification (which would need an entry of a lock
// table that may be full).
func (s *session) undo(ctx context.Context, id int64) {
	if s.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	s.plainUnlock(ctx, []int64{id})
}

// TryAcquire implements lock.Batch in one statement on the session with
// the fewest grants (opening it first if needed): the acquire of
// Lock.TryAcquire, with its token, quarantine and pooler check, which also
// records the grant's token for Inspect and List. A full lock table gives
// ErrLockTableFull and leaves the session and its grants as they were.
func (b *batch) TryAcquire(ctx context.Context, key string) (h lock.Handle, err error) {
	if err := backendkit.Validate(ctx, key, b.ttl, limits); err != nil {
		return nil, err
	}
	l := b.l
	start := time.Now()
	defer func() { l.metrics.Attempt(ctx, start, err) }()
	s, err := b.pick()
	if err != nil {
		return nil, err
	}
	defer s.coming(-1)
	if err := s.lock(ctx); err != nil {
		return nil, backendkit.Unavailable("pglock: batch acquire", err)
	}
	bh, err := s.acquire(ctx, key)
	s.unlock()
	if err != nil {
		return nil, err
	}
	b.arm(bh.ValidUntil().Add(abandonGrace))
	return backendkit.Deliver(bh, nil)
}

// acquire runs TryAcquire's statement; io is held.
func (s *session) acquire(ctx context.Context, key string) (*batchHandle, error) {
	l, b := s.b.l, s.b
	if s.conn == nil {
		if err := s.deadErr(); err != nil {
			return nil, backendkit.Unavailable("pglock: batch acquire", err)
		}
		if err := s.open(ctx, key); err != nil {
			s.die(fmt.Errorf("the session could not be opened: %w", err))
			return nil, err
		}
	}
	id := l.id(key)
	s.mu.Lock()
	mine := s.grants[id]
	s.mu.Unlock()
	if mine != nil {
		// Advisory locks are reentrant: the session would be granted
		// the key again.
		return nil, backendkit.NotAcquired(key, max(0, time.Until(mine.ValidUntil())))
	}
	sent := time.Now()
	ttl := s.timeout(sent, b.ttl)
	sql, args := l.sql.batch.acquire[0], []any{id, s.pid, l.pooled, l.ttlGUC, ms(ttl), l.appOwner}
	register := l.unregistered(id)
	if register {
		sql, args = l.sql.batch.acquire[1], append(args, []byte(key), l.namespace)
	}
	var (
		pid int32
		res *string
	)
	err := s.conn.QueryRow(ctx, sql, args...).Scan(&pid, &res)
	if err == nil && register {
		l.registered(id)
	}
	switch {
	case err != nil:
		if !s.failed(err) {
			// The statement may have taken the lock before it failed:
			// a session lock outlives its transaction.
			s.undo(ctx, id)
		}
		return nil, l.acquireErr(key, err)
	case res == nil || (pid != s.pid && !l.pooled):
		err := poolerMismatch(pid, s.pid)
		s.die(err)
		return nil, err
	case len(*res) > 0 && (*res)[0] == 'h':
		var rem time.Duration
		if n, err := strconv.ParseInt((*res)[1:], 10, 64); err == nil {
			rem = heldFor(n)
		}
		return nil, backendkit.NotAcquired(key, rem)
	}
	_, ran, app, ok := parseGrantReply([]byte(*res))
	tok, head, tail, ok2 := splitApp(app)
	if !ok || !ok2 {
		s.undo(ctx, id)
		return nil, backendkit.Unavailable("pglock: batch acquire", fmt.Errorf("unexpected reply %q", *res))
	}
	s.head, s.tail = string(head), string(tail)
	granted := sent.Add(time.Duration(ran) * time.Microsecond) // as ValidUntil counts it
	s.keep(granted, ttl)
	h := &batchHandle{s: s, key: key, id: id, token: tok, validUntil: backendkit.ValidUntil(granted, b.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grants == nil { // cannot happen: only a statement that failed ends the session
		return nil, backendkit.Unavailable("pglock: batch acquire", errors.New("the session ended"))
	}
	s.grants[id] = h
	return h, nil
}

func (s *session) deadErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

// Renew implements lock.Batch: one statement per session that holds some
// of hs, the sessions' statements side by side. A handle not made by this
// batch gets an error matching lock.ErrInvalidArgument.
func (b *batch) Renew(ctx context.Context, hs []lock.Handle) []error {
	out := make([]error, len(hs))
	if err := backendkit.CheckContext(ctx); err != nil {
		for i := range out {
			out[i] = err
		}
		return out
	}
	var (
		order []*session
		of    = map[*session][]int{}
	)
	for i, x := range hs {
		h, ok := x.(*batchHandle)
		if !ok || h == nil || h.s.b != b {
			out[i] = backendkit.Invalid("pglock", "the handle was not made by this batch")
			continue
		}
		if of[h.s] == nil {
			order = append(order, h.s)
		}
		of[h.s] = append(of[h.s], i)
	}
	if len(order) == 1 {
		order[0].renew(ctx, hs, of[order[0]], out)
		return out
	}
	var wg sync.WaitGroup
	for _, s := range order {
		wg.Go(func() { s.renew(ctx, hs, of[s], out) })
	}
	wg.Wait()
	return out
}

// renew renews the handles hs[at...] of the session, writing their
// outcomes to out.
func (s *session) renew(ctx context.Context, hs []lock.Handle, at []int, out []error) {
	each := func(f func(h *batchHandle) error) {
		for _, i := range at {
			out[i] = f(hs[i].(*batchHandle))
		}
	}
	if err := s.lock(ctx); err != nil {
		each(func(h *batchHandle) error { return h.gone("renew", backendkit.Unavailable("pglock: batch renew", err)) })
		return
	}
	defer s.unlock()
	if s.conn == nil {
		each(func(h *batchHandle) error { return h.gone("renew", h.lostErr("renew")) })
		return
	}
	l, b := s.b.l, s.b
	sent := time.Now()
	ttl := s.timeout(sent, b.ttl)
	var (
		ok   *string
		held []int64
	)
	err := s.conn.QueryRow(ctx, l.sql.batch.renew, s.pid, l.ttlGUC, ms(ttl), s.app(ttl)).Scan(&ok, &held)
	switch {
	case err != nil && ctx.Err() != nil:
		// Cut short: unknown, though pgx closed the connection, which
		// ends the grants for the next call.
		each(func(h *batchHandle) error { return h.gone("renew", backendkit.Unavailable("pglock: batch renew", err)) })
		s.failed(err)
		return
	case err != nil:
		if s.failed(err) {
			each(func(h *batchHandle) error { return h.lostErr("renew") })
			return
		}
		each(func(h *batchHandle) error { return h.gone("renew", backendkit.Unavailable("pglock: batch renew", err)) })
		return
	case ok == nil:
		s.die(errors.New("the session answering is not the one the grants were made on (a pooler in transaction mode?)"))
		each(func(h *batchHandle) error { return h.lostErr("renew") })
		return
	}
	s.keep(sent, ttl)
	slices.Sort(held)
	until := backendkit.ValidUntil(sent, b.ttl)
	each(func(h *batchHandle) error {
		if _, found := slices.BinarySearch(held, h.id); !found {
			h.lose(errors.New("the lock is not in pg_locks for the batch's session"))
			s.drop(h)
			return h.lostErr("renew")
		}
		return h.renewed(until)
	})
}

// arm makes the batch's sweep run by at.
func (b *batch) arm(at time.Time) { b.reap.arm(at) }

// sweep unlocks the grants whose ValidUntil passed without a renewal (a
// holder that stopped renewing one and did not release it: the session,
// kept alive by the others, would hold it forever), and arms the timer
// for the next that may.
func (b *batch) sweep() {
	b.reap.fired() // before the snapshot: a grant made after it arms the timer itself
	b.mu.Lock()
	sessions := slices.Clone(b.sessions)
	b.mu.Unlock()
	var next time.Time
	for _, s := range sessions {
		if s == nil {
			continue
		}
		if due := s.sweep(); !due.IsZero() && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	if !next.IsZero() {
		b.arm(next)
	}
}

// sweep unlocks the session's expired grants and returns when the next is
// due (zero: none held).
func (s *session) sweep() (next time.Time) {
	expired := func(now time.Time) (out []*batchHandle) {
		next = time.Time{}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, h := range s.grants {
			due := h.ValidUntil().Add(abandonGrace)
			switch {
			case !now.Before(due):
				out = append(out, h)
			case next.IsZero() || due.Before(next):
				next = due
			}
		}
		return out
	}
	if len(expired(time.Now())) == 0 {
		return next
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.b.ttl, time.Second))
	defer cancel()
	if s.lock(ctx) != nil {
		return time.Now().Add(abandonGrace) // busy for long: try again soon
	}
	defer s.unlock()
	hs := expired(time.Now()) // a Renew may have come first
	if len(hs) == 0 || s.conn == nil {
		return next
	}
	ids := make([]int64, len(hs))
	for i, h := range hs {
		ids[i] = h.id
	}
	s.unlockIDs(ctx, ids)
	for _, h := range hs {
		h.lose(errors.New("its ttl passed without a renewal: the batch unlocked it"))
		s.drop(h)
	}
	return next
}

// Close implements lock.Batch: it ends the batch's sessions, which frees
// their locks, after deleting their token rows.
func (b *batch) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.reap.close()
	sessions := slices.Clone(b.sessions)
	b.mu.Unlock()
	b.l.heldMu.Lock()
	delete(b.l.batches, b)
	b.l.heldMu.Unlock()
	cause := errors.New("the batch was closed")
	var err error
	for _, s := range sessions {
		if s == nil {
			continue
		}
		if e := s.lock(ctx); e != nil {
			// A statement runs on it, bounded by its own context: end
			// the session after it.
			go func() {
				s.io <- struct{}{}
				s.die(cause)
				s.unlock()
			}()
			err = backendkit.Unavailable("pglock: batch close", e)
			continue
		}
		if s.conn != nil {
			_, _ = s.conn.Exec(ctx, b.l.sql.batch.drop)
		}
		s.die(cause)
		s.unlock()
	}
	return err
}

// batchHandle is a grant of a batch: its session holds the advisory lock
// id.
type batchHandle struct {
	s     *session
	key   string
	id    int64
	token uint64

	mu         sync.Mutex
	validUntil time.Time
	released   bool
	cause      error // why it was lost, once it was
}

var _ lock.Handle = (*batchHandle)(nil)

func (h *batchHandle) Key() string   { return h.key }
func (h *batchHandle) Token() uint64 { return h.token }

func (h *batchHandle) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Limits implements lock.Limited for Keep.
func (h *batchHandle) Limits() lock.Limits { return limits }

func (h *batchHandle) lose(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cause == nil && !h.released {
		h.cause = cause
	}
}

func (h *batchHandle) lostErr(what string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lostErrLocked(what)
}

func (h *batchHandle) lostErrLocked(what string) error {
	if h.released {
		return fmt.Errorf("%w: %s after release of %q (token %d)", lock.ErrLost, what, h.key, h.token)
	}
	if h.cause == nil {
		h.cause = errors.New("the grant is gone")
	}
	return fmt.Errorf("%w: %s of %q (token %d): %w", lock.ErrLost, what, h.key, h.token, h.cause)
}

// gone returns the handle's loss if it is released or lost, else err.
func (h *batchHandle) gone(what string, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.cause != nil {
		return h.lostErrLocked(what)
	}
	return err
}

// renewed moves ValidUntil on to until (never back: an Extend may have
// given it longer) unless the handle is gone.
func (h *batchHandle) renewed(until time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.cause != nil {
		return h.lostErrLocked("renew")
	}
	if until.After(h.validUntil) {
		h.validUntil = until
	}
	return nil
}

// Extend implements lock.Handle in one statement on the grant's session:
// it checks that the session still holds the lock and sets the session's
// timeout to the longest of ttl, the batch's ttl and what its other grants
// need (see NewBatch). A cancelled Extend ends the session.
func (h *batchHandle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := limits.CheckTTL(ttl); err != nil {
		return err
	}
	s := h.s
	if err := s.lock(ctx); err != nil {
		return h.gone("extend", backendkit.Unavailable("pglock: extend", err))
	}
	defer s.unlock()
	if err := h.gone("extend", nil); err != nil {
		return err
	}
	if s.conn == nil {
		return h.lostErr("extend")
	}
	l := s.b.l
	sent := time.Now()
	// A longer ttl than this server incarnation has recorded is recorded
	// first (see quarantine.go).
	_, err := l.quarantine(ctx, s.conn, ttl)
	var res *string
	timeout := s.timeout(sent, ttl)
	if err == nil {
		err = s.conn.QueryRow(ctx, l.sql.extend, s.pid, h.id, l.ttlGUC, ms(timeout), s.head, s.tail).Scan(&res)
	}
	switch {
	case err != nil && s.failed(err):
		return h.lostErr("extend")
	case err != nil:
		return backendkit.Unavailable("pglock: extend", err)
	case res == nil:
		h.lose(errors.New("the lock is not in pg_locks for the batch's session"))
		s.drop(h)
		return h.lostErr("extend")
	}
	s.keep(sent, timeout)
	h.mu.Lock()
	h.validUntil = backendkit.ValidUntil(sent, ttl)
	until := h.validUntil
	h.mu.Unlock()
	s.b.arm(until.Add(abandonGrace))
	return nil
}

// Release implements lock.Handle in one statement on the grant's session:
// it unlocks the key alone, deletes its token row and notifies the key's
// waiters if there are any. The session stays.
func (h *batchHandle) Release(ctx context.Context) (err error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	s := h.s
	l := s.b.l
	if err := s.lock(ctx); err != nil {
		return h.gone("release", backendkit.Unavailable("pglock: release", err))
	}
	defer s.unlock()
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return h.lostErr("second release")
	}
	h.released = true
	cause := h.cause
	h.mu.Unlock()
	defer func() { l.metrics.Release(ctx, err) }()
	if cause != nil || s.conn == nil {
		return fmt.Errorf("%w: release of %q (token %d): %w", lock.ErrLost, h.key, h.token, cmp(cause, s.deadErr()))
	}
	s.drop(h)
	hi, lo := interest(h.id)
	var res *string
	err = s.conn.QueryRow(ctx, l.sql.batch.release, h.id, l.ttlGUC, ms(s.timeout(time.Now(), s.b.ttl)),
		hi, lo, l.channel, payload(h.id)).Scan(&res)
	switch {
	case err != nil && ctx.Err() == nil && s.failed(err):
		return fmt.Errorf("%w: release of %q (token %d): the batch's session ended: %w", lock.ErrLost, h.key, h.token, err)
	case err != nil:
		// Unknown outcome (cancelled, or a server error such as a full
		// lock table): unlock the key with a plain statement, or end the
		// session, which releases it for sure.
		if !s.failed(err) {
			s.undo(ctx, h.id)
		}
		if ctx.Err() != nil {
			return backendkit.Unavailable("pglock: release", err)
		}
		return nil
	case res == nil:
		return fmt.Errorf("%w: release of %q (token %d): the batch's session did not hold the lock", lock.ErrLost, h.key, h.token)
	}
	return nil
}

// cmp returns the first non-nil error.
func cmp(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return errors.New("the grant is gone")
}

// lockTableSize is the size the server's shared lock table is made for.
const lockTableSize = `SELECT current_setting('max_locks_per_transaction')::int8 * (current_setting('max_connections')::int8 + current_setting('max_prepared_transactions')::int8)`
