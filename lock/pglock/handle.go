package pglock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// handle is one grant: the session of conn holds the advisory lock id.
type handle struct {
	l     *Lock
	key   string
	id    int64
	token uint64
	pid   int32 // the holding session
	// shared: a shared grant (TryAcquireShared); group: the keys of a
	// group (TryAcquireAll), nil for one key.
	shared bool
	group  *groupKeys

	// The grant's arguments as text, built once (see Lock.acquireOne):
	// slices of buf.
	idText, pidText, hiText, loText, payload []byte
	ttl                                      time.Duration // the ttl of ttlText
	ttlText                                  []byte
	// appHead and appTail are the holder's application_name before and
	// after its ttl: "<token> " and " <since> <owner>".
	appHead, appTail []byte
	// buf: the fixed arguments up to argsEnd, the ttl up to ttlEnd, then
	// the acquire statement's reply.
	buf [256]byte

	mu         sync.Mutex // serialises Extend, Release and the watcher
	conn       *pgxpool.Conn
	validUntil time.Time
	released   bool
	cause      error // why the grant was lost, once it was

	lost     chan struct{} // made by the first Lost call, closed on loss
	lostOnce sync.Once
	watching context.CancelFunc // stops the watcher
	watched  chan struct{}      // closed when the watcher has returned
}

var _ lock.LossNotifier = (*handle)(nil)

// Limits implements lock.Limited for Keep.
func (h *handle) Limits() lock.Limits { return limits }

func (h *handle) Key() string   { return h.key }
func (h *handle) Token() uint64 { return h.token }

func (h *handle) ValidUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// build writes the grant's arguments into buf; a call for another key of
// the same grant (TryAcquireAny) starts again.
func (h *handle) build(pid int32) {
	b := h.buf[:0:argsEnd]
	field := func(f func([]byte) []byte) []byte {
		n := len(b)
		b = f(b)
		return b[n:len(b):len(b)]
	}
	hi, lo := interest(h.id)
	h.idText = field(func(b []byte) []byte { return strconv.AppendInt(b, h.id, 10) })
	h.pidText = field(func(b []byte) []byte { return strconv.AppendInt(b, int64(pid), 10) })
	h.hiText = field(func(b []byte) []byte { return strconv.AppendInt(b, int64(hi), 10) })
	h.loText = field(func(b []byte) []byte { return strconv.AppendInt(b, int64(lo), 10) })
	h.payload = field(func(b []byte) []byte { return appendPayload(b, h.id) })
	h.ttlText = nil
}

const (
	argsEnd = 80 // the most idText to payload take: 20+11+11+11+14 bytes
	ttlEnd  = argsEnd + 20
)

// setTTL sets ttlText to ttl in whole milliseconds (rounded up), reusing
// its space when the ttl is unchanged.
func (h *handle) setTTL(ttl time.Duration) {
	if h.ttlText != nil && h.ttl == ttl {
		return
	}
	h.ttl = ttl
	var b [20]byte
	h.ttlText = append(h.buf[argsEnd:argsEnd:ttlEnd], strconv.AppendInt(b[:0], int64((ttl+time.Millisecond-1)/time.Millisecond), 10)...)
}

// reply is the space of buf for the acquire statement's reply.
func (h *handle) reply() []byte { return h.buf[ttlEnd:ttlEnd] }

// setApp records application_name "<token> <ttl> <since> <owner>" as the
// acquire statement set it: the token, and the parts around the ttl for
// Extend.
func (h *handle) setApp(app []byte) bool {
	tok, head, tail, ok := splitApp(app)
	if ok {
		h.token, h.appHead, h.appTail = tok, head, tail
	}
	return ok
}

// splitApp reads the token of application_name "<token> <ttl> <since>
// <owner>" and the parts around the ttl: "<token> " and " <since> <owner>".
func splitApp(app []byte) (tok uint64, head, tail []byte, ok bool) {
	i := bytes.IndexByte(app, ' ')
	if i < 0 {
		return 0, nil, nil, false
	}
	j := bytes.IndexByte(app[i+1:], ' ')
	if j < 0 {
		return 0, nil, nil, false
	}
	tok, err := strconv.ParseUint(string(app[:i]), 10, 64)
	if err != nil {
		return 0, nil, nil, false
	}
	return tok, app[: i+1 : i+1], app[i+1+j:], true
}

func (h *handle) lostErr(what string) error {
	if h.cause != nil {
		return fmt.Errorf("%w: %s of %q (token %d): %w", lock.ErrLost, what, h.key, h.token, h.cause)
	}
	return fmt.Errorf("%w: %s of %q (token %d): the grant is gone", lock.ErrLost, what, h.key, h.token)
}

// abandonGrace is how long after ValidUntil an unrenewed grant's
// connection is closed (see Lock.sweep).
const abandonGrace = 50 * time.Millisecond

// abandoned ends the grant if its ttl passed without a renewal and
// reports when it is due otherwise (zero: released or lost).
func (h *handle) abandoned(now time.Time) (due time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.conn == nil {
		return time.Time{}
	}
	due = h.validUntil.Add(abandonGrace)
	if now.Before(due) {
		return due
	}
	h.markLost(errors.New("its ttl passed without a renewal: the session was closed"))
	return time.Time{}
}

// Lost implements lock.LossNotifier: the channel is closed when the holding
// session ends (terminated, timed out by the server, connection broken).
// The first call starts a goroutine that waits on the session's socket
// while no operation runs on it.
func (h *handle) Lost() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost == nil {
		h.lost = make(chan struct{})
		switch {
		case h.conn != nil:
			h.watch()
		case h.cause != nil:
			h.signalLost() // through the once: Close may abandon it after (markLost)
		}
	}
	return h.lost
}

// watch starts the watcher; h.mu is held. An idle session receives nothing
// unless the server ends it (a FATAL error, then EOF) or the connection
// breaks: WaitForNotification returns then.
func (h *handle) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.watching, h.watched = cancel, done
	pg := h.conn.Conn().PgConn()
	go func() {
		err := pg.WaitForNotification(ctx)
		close(done)
		if ctx.Err() == nil {
			// Not stopped by an operation: the session is gone (a
			// notification cannot arrive, nothing LISTENs on it).
			_ = err
			h.signalLost()
		}
	}()
}

// unwatch stops the watcher and waits for it; h.mu is held.
func (h *handle) unwatch() {
	if h.watching != nil {
		h.watching()
		<-h.watched
		h.watching, h.watched = nil, nil
	}
}

func (h *handle) signalLost() {
	h.lostOnce.Do(func() {
		if h.lost != nil {
			close(h.lost)
		}
	})
}

// markLost records the loss, ends the session and signals; h.mu is held.
func (h *handle) markLost(cause error) {
	if h.cause == nil {
		h.cause = cause
	}
	h.unwatch()
	if h.conn != nil {
		destroy(h.conn)
		h.conn = nil
		h.l.untrack(h)
	}
	if h.lost != nil {
		h.signalLost()
	}
}

// abandon ends the grant by closing its session (Lock.Close).
func (h *handle) abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.markLost(errors.New("the Lock was closed"))
}

// end closes the session of a grant that was never handed out.
func (h *handle) end() {
	destroy(h.conn)
	h.conn = nil
}

// broken reports whether err ended the holding connection: pgx closes it on
// network errors, on a cancelled context mid-statement, and on the FATAL
// error a server sends when it ends the session (pg_terminate_backend,
// idle_session_timeout, shutdown).
func (h *handle) broken() bool { return h.conn.Conn().IsClosed() }

// Extend implements lock.Handle in one round trip: it checks that the
// session still holds the lock (pg_locks) and resets idle_session_timeout
// to ttl. A cancelled Extend ends the session, and so the grant.
func (h *handle) Extend(ctx context.Context, ttl time.Duration) error {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	if err := limits.CheckTTL(ttl); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.released:
		return h.lostErr("extend after release")
	case h.conn == nil:
		return h.lostErr("extend")
	}
	h.unwatch()
	l := h.l
	sent := time.Now()
	// A longer ttl than this server incarnation has recorded is recorded
	// first (see quarantine.go); the handle's incarnation is out of its
	// quarantine, since it granted the handle.
	_, err := l.quarantine(ctx, h.conn, ttl)
	var held bool
	if err == nil {
		h.setTTL(ttl)
		if h.group != nil {
			held, err = h.group.extend(ctx, h)
		} else {
			pg := h.conn.Conn().PgConn()
			args := [...][]byte{h.pidText, h.idText, l.ttlGUCText, h.ttlText, h.appHead, h.appTail}
			var cols [1][]byte
			err = exec(ctx, pg, l.preparedOf(h.conn).extend, args[:], cols[:], nil)
			held = cols[0] != nil
		}
	}
	switch {
	case err != nil && h.broken():
		h.markLost(fmt.Errorf("the holding session ended: %w", err))
		return h.lostErr("extend")
	case err != nil:
		if h.lost != nil {
			h.watch()
		}
		return backendkit.Unavailable("pglock: extend", err)
	case !held:
		h.markLost(errors.New("the lock is not in pg_locks for the holding session (a pooler in transaction mode?)"))
		return h.lostErr("extend")
	}
	h.validUntil = backendkit.ValidUntil(sent, ttl)
	l.reap.arm(h.validUntil.Add(abandonGrace)) // a shorter ttl may be due before the reaper
	if h.lost != nil {
		h.watch()
	}
	return nil
}

// Release implements lock.Handle in one round trip: it unlocks, resets
// the session's idle_session_timeout, and notifies the key's waiters if
// there are any (a NOTIFY assigns a transaction id, so it is sent only
// then). The connection goes back to the pool.
func (h *handle) Release(ctx context.Context) (err error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.lostErr("second release")
	}
	h.released = true
	defer func() { h.l.metrics.Release(ctx, err) }()
	if h.conn == nil {
		return h.lostErr("release")
	}
	h.unwatch()
	l := h.l
	var ok bool
	if h.group != nil {
		ok, err = h.group.release(ctx, h)
	} else {
		stmt := l.preparedOf(h.conn).release
		if h.shared {
			stmt = l.preparedOf(h.conn).releaseShared
		}
		args := [...][]byte{h.idText, l.ttlGUCText, l.ttlResetText, h.hiText, h.loText, l.channelText, h.payload}
		var cols [1][]byte
		err = exec(ctx, h.conn.Conn().PgConn(), stmt, args[:], cols[:], nil)
		ok = cols[0] != nil
	}
	switch {
	case err != nil && h.broken() && ctx.Err() == nil:
		h.markLost(fmt.Errorf("the holding session ended: %w", err))
		return h.lostErr("release")
	case err != nil:
		// Unknown outcome (cancelled, or a server error such as a full
		// lock table): ending the session releases the lock for sure.
		h.markLost(errors.New("released by ending the session"))
		if ctx.Err() != nil {
			return backendkit.Unavailable("pglock: release", err)
		}
		return nil
	case !ok:
		h.markLost(errors.New("the holding session did not hold the lock (a pooler in transaction mode?)"))
		return h.lostErr("release")
	}
	h.conn.Release()
	h.conn = nil
	l.untrack(h)
	return nil
}

// interest is the (int4, int4) advisory lock that stands for the waiters of
// lock id: the same 64 bits in the other advisory space.
func interest(id int64) (hi, lo int32) { return int32(uint64(id) >> 32), int32(uint32(id)) }

// payload is the NOTIFY payload and Notifier key of a lock id.
func payload(id int64) string { return strconv.FormatInt(id, 36) }

func appendPayload(b []byte, id int64) []byte { return strconv.AppendInt(b, id, 36) }
