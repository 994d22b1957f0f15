package pglock

import (
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
	pid   int32  // the holding session
	since string // the grant's server time in Unix ms, as application_name shows it

	mu         sync.Mutex // serialises Extend, Release and the watcher
	conn       *pgxpool.Conn
	validUntil time.Time
	released   bool
	cause      error // why the grant was lost, once it was

	lost     chan struct{} // made by the first Lost call, closed on loss
	lostOnce sync.Once
	expiry   *time.Timer        // frees the connection of a grant left to expire
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

func (h *handle) lostErr(what string) error {
	if h.cause != nil {
		return fmt.Errorf("%w: %s of %q (token %d): %w", lock.ErrLost, what, h.key, h.token, h.cause)
	}
	return fmt.Errorf("%w: %s of %q (token %d): the grant is gone", lock.ErrLost, what, h.key, h.token)
}

// watchAbandon arms the timer that frees the connection of a grant whose
// holder lets it expire instead of releasing it (a timer's tick claims do
// that on purpose): once ValidUntil has passed without a renewal, the
// session is closed and its connection leaves the pool, as the server's
// idle_session_timeout would do to the session anyway — but without the
// client's pool slot staying checked out forever.
func (h *handle) watchAbandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.expiry = time.AfterFunc(time.Until(h.validUntil)+abandonGrace, h.checkAbandoned)
}

// abandonGrace is how long after ValidUntil an unrenewed grant's
// connection is closed.
const abandonGrace = 50 * time.Millisecond

func (h *handle) checkAbandoned() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.conn == nil {
		return
	}
	if left := time.Until(h.validUntil); left > -abandonGrace {
		h.expiry.Reset(left + abandonGrace) // renewed meanwhile
		return
	}
	h.markLost(errors.New("its ttl passed without a renewal: the session was closed"))
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
			close(h.lost)
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
	t := ms(ttl)
	var held bool
	var set *string
	sent := time.Now()
	// A longer ttl than this server incarnation has recorded is recorded
	// first (see quarantine.go); the handle's incarnation is out of its
	// quarantine, since it granted the handle.
	_, err := l.quarantine(ctx, h.conn, ttl)
	if err == nil {
		err = h.conn.QueryRow(ctx, l.sql.extend, h.pid, h.id, l.ttlGUC, t,
			strconv.FormatUint(h.token, 10)+" "+t+" "+h.since+" "+l.appOwner).Scan(&held, &set)
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
	if h.expiry != nil {
		h.expiry.Stop()
	}
	defer func() { h.l.metrics.Release(ctx, err) }()
	if h.conn == nil {
		return h.lostErr("release")
	}
	h.unwatch()
	l := h.l
	hi, lo := interest(h.id)
	var ok bool
	var set, notified *string
	err = h.conn.QueryRow(ctx, l.sql.release, h.id, l.ttlGUC, l.ttlReset, hi, lo,
		l.channel, payload(h.id)).Scan(&ok, &set, &notified)
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
