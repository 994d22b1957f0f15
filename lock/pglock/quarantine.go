package pglock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Advisory locks live in the server's memory: a restart or a failover to a
// standby forgets every grant, while the holders still believe in theirs
// until their ValidUntil. So that no successor is granted before then, a
// server incarnation (a postmaster, told apart by its start time) grants
// nothing until every grant an earlier incarnation may have made has
// expired: its quarantine.
//
// The table leasehold_incarnations keeps, per incarnation, when a client
// first saw it (first_seen, the server's clock) and the largest ttl granted
// in it (ttl_ms). Before a grant or an extension of ttl d on an
// incarnation, a Lock makes sure that ttl_ms ≥ d there (one round trip, the
// first time per incarnation and whenever d grows), committed
// synchronously: with a synchronous standby it is on the standby before
// the grant is made. Every grant of incarnation X was made before X ended,
// which was before its successor was first seen, so it ends by
// first_seen(successor) + ttl_ms(X). The quarantine of an incarnation ends
// at the latest of these over the incarnations before it. The first
// incarnation a database sees has none; nor has any incarnation once its
// quarantine is over.
//
// What it does not cover: a standby promoted while the old primary still
// serves other clients (a split brain; PostgreSQL has no fencing of its
// own) keeps granting there; an asynchronous standby may lack the ttl the
// old primary recorded last; a reset connection frees its grant at once on
// a live server (see the package documentation).

// quarantinedError is a refusal in a quarantine: it matches
// ErrQuarantined and unwraps to a *lock.NotAcquiredError.
type quarantinedError struct{ notAcquired *lock.NotAcquiredError }

func (e *quarantinedError) Error() string {
	return fmt.Sprintf("pglock: not acquired: %q: the server restarted or failed over and grants nothing for %v more, until every grant it forgot has expired",
		e.notAcquired.Key, e.notAcquired.Remaining.Round(time.Millisecond))
}

func (e *quarantinedError) Unwrap() []error { return []error{e.notAcquired, ErrQuarantined} }

// incarnationKey is the CustomData key of a prepared connection's server
// incarnation: the postmaster's start time in µs since the Unix epoch.
const incarnationKey = "leasehold/pglock/incarnation"

// incarnation is what a Lock knows of one server incarnation.
type incarnation struct {
	ttl   time.Duration // the largest ttl recorded for it
	until time.Time     // the end of its quarantine (local clock)
}

// incarnations is a Lock's knowledge of the incarnations its connections
// reached.
type incarnations struct {
	mu   sync.Mutex
	seen map[int64]incarnation
}

// quarantine returns how long grants of ttl must still wait on c's server
// incarnation, after recording ttl there if it is larger than what this
// Lock recorded before. Its only round trip is that recording; its error
// is the statement's.
func (l *Lock) quarantine(ctx context.Context, c *pgxpool.Conn, ttl time.Duration) (time.Duration, error) {
	if l.noQuar {
		return 0, nil
	}
	started, _ := c.Conn().PgConn().CustomData()[incarnationKey].(int64)
	l.inc.mu.Lock()
	inc, ok := l.inc.seen[started]
	l.inc.mu.Unlock()
	if !ok || inc.ttl < ttl {
		var recorded, remaining int64
		if err := c.QueryRow(ctx, l.sql.visit, ms(ttl)).Scan(&recorded, &remaining); err != nil {
			return 0, err
		}
		inc = incarnation{ttl: time.Duration(recorded) * time.Millisecond}
		if remaining > 0 {
			// Counted from now, after the reply: later than the server's
			// own end. The drift allowance covers clocks' rates, as in
			// ValidUntil.
			q := backendkit.RemainingMillis(remaining)
			inc.until = time.Now().Add(q + backendkit.DriftAllowance(q))
		}
		l.inc.mu.Lock()
		if l.inc.seen == nil {
			l.inc.seen = map[int64]incarnation{}
		}
		if old, ok := l.inc.seen[started]; !ok || old.ttl < inc.ttl {
			l.inc.seen[started] = inc
		}
		l.inc.mu.Unlock()
	}
	return max(0, time.Until(inc.until)), nil
}
