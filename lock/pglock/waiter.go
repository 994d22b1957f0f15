package pglock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Subscribe implements lock.Waiter. All subscriptions of one Lock share one
// connection, taken out of the pool on first use, that LISTENs on the
// namespace's channel and holds a shared "interest" advisory lock for each
// key someone waits for. Release notifies only when a key has interest
// (pg_try_advisory_xact_lock fails), so an uncontended release assigns no
// transaction id. Subscribe returns once LISTEN is active and the interest
// is held: a release after that wakes the subscription. When the
// connection breaks every waiter is woken, and it is made again.
func (l *Lock) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	if err := backendkit.ValidateSubscribe(ctx, keys, limits); err != nil {
		return nil, err
	}
	if err := l.ensureSetup(ctx); err != nil {
		return nil, err
	}
	ids := make([]int64, len(keys))
	names := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = l.id(k)
		names[i] = payload(ids[i])
	}
	sub := l.notifier.Subscribe(names...)
	if err := l.listener.add(ctx, ids); err != nil {
		_ = sub.Close()
		return nil, err
	}
	return &subscription{Subscription: sub, ln: &l.listener, ids: ids}, nil
}

type subscription struct {
	lock.Subscription
	ln   *listener
	ids  []int64
	once sync.Once
}

func (s *subscription) Close() error {
	s.once.Do(func() { s.ln.remove(s.ids) })
	return s.Subscription.Close()
}

var errClosed = backendkit.Invalid("pglock", "Lock is closed")

// listener owns the waiting connection. Its goroutine (loop) alone uses the
// connection; others ask it through want and pending and interrupt its wait.
type listener struct {
	l *Lock

	mu      sync.Mutex
	want    map[int64]int // interest wanted: subscriptions per id
	dirty   bool          // want changed since the last sync
	pending []chan error  // Subscribe calls waiting for the next sync
	wake    context.CancelFunc
	stop    context.CancelFunc // ends the loop
	closed  bool
	done    chan struct{}
}

func (ln *listener) add(ctx context.Context, ids []int64) error {
	ack := make(chan error, 1)
	ln.mu.Lock()
	if ln.closed {
		ln.mu.Unlock()
		return errClosed
	}
	if ln.want == nil {
		ln.want = map[int64]int{}
	}
	for _, id := range ids {
		ln.want[id]++
	}
	ln.dirty = true
	ln.pending = append(ln.pending, ack)
	if ln.done == nil {
		var life context.Context
		life, ln.stop = context.WithCancel(context.Background())
		ln.done = make(chan struct{})
		go ln.loop(life, ln.done)
	}
	ln.interrupt()
	ln.mu.Unlock()
	select {
	case err := <-ack:
		if err != nil {
			ln.remove(ids)
		}
		return err
	case <-ctx.Done():
		ln.remove(ids)
		return context.Cause(ctx)
	}
}

// interrupt ends the loop's wait for a notification; ln.mu is held.
func (ln *listener) interrupt() {
	if ln.wake != nil {
		ln.wake()
		ln.wake = nil
	}
}

// remove drops interest; the loop gives the locks up at once, so that
// releases stop notifying.
func (ln *listener) remove(ids []int64) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for _, id := range ids {
		if ln.want[id]--; ln.want[id] <= 0 {
			delete(ln.want, id)
		}
	}
	ln.dirty = true
	ln.interrupt()
}

func (ln *listener) close() {
	ln.mu.Lock()
	ln.closed = true
	done := ln.done
	if ln.stop != nil {
		ln.stop()
	}
	ln.interrupt()
	ln.mu.Unlock()
	if done != nil {
		<-done
	}
}

// loop keeps the connection: connect, LISTEN, sync the interest locks with
// want, answer pending Subscribes, wait for a notification or a wake-up.
func (ln *listener) loop(life context.Context, done chan struct{}) {
	defer close(done)
	l := ln.l
	var (
		conn  *pgx.Conn
		held  = map[int64]bool{}
		delay time.Duration
	)
	drop := func() {
		if conn != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(ctx)
			cancel()
			conn = nil
		}
		clear(held)
	}
	defer drop()
	fail := func(err error, pending []chan error) {
		l.log.Debug("leasehold: pglock waiting connection failed", "err", err)
		drop()
		// Releases may be missed until the interest is held again.
		l.notifier.NotifyAll()
		for _, ack := range pending {
			ack <- backendkit.Unavailable("pglock: subscribe", err)
		}
		delay = min(max(2*delay, 50*time.Millisecond), time.Second)
	}
	for life.Err() == nil {
		ln.mu.Lock()
		var take, give []int64
		for id := range ln.want {
			if !held[id] {
				take = append(take, id)
			}
		}
		for id := range held {
			if ln.want[id] == 0 {
				give = append(give, id)
			}
		}
		pending := ln.pending
		ln.pending, ln.dirty = nil, false
		ln.mu.Unlock()

		if delay > 0 && conn == nil {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-life.Done():
			}
			t.Stop()
		}
		reconnected := false
		if conn == nil {
			c, err := ln.connect(life)
			if err != nil {
				fail(err, pending)
				continue
			}
			conn, reconnected = c, delay > 0
		}
		if err := ln.sync(life, conn, take, give); err != nil {
			fail(err, pending)
			continue
		}
		for _, id := range take {
			held[id] = true
		}
		for _, id := range give {
			delete(held, id)
		}
		delay = 0
		for _, ack := range pending {
			ack <- nil
		}
		if reconnected {
			l.notifier.NotifyAll() // releases while the connection was down were missed
		}

		ctx, cancel := context.WithCancel(life)
		ln.mu.Lock()
		if ln.dirty || len(ln.pending) > 0 {
			ln.mu.Unlock()
			cancel()
			continue
		}
		ln.wake = cancel
		ln.mu.Unlock()
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if n != nil {
			l.notifier.Notify(n.Payload)
		}
		if err != nil && (ctx.Err() == nil || conn.IsClosed()) {
			fail(err, nil)
		}
	}
}

// connect takes a connection out of the pool for good and LISTENs.
func (ln *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	l := ln.l
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	// Waiting is idleness: a role default for idle_session_timeout must not
	// end this session.
	if _, err := conn.Exec(ctx, "SELECT set_config($1::text, '0', false), set_config('application_name', $2::text, false)",
		l.ttlGUC, l.appOwner); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// sync takes and gives up interest locks in one statement.
func (ln *listener) sync(ctx context.Context, conn *pgx.Conn, take, drop []int64) error {
	if len(take) == 0 && len(drop) == 0 {
		return nil
	}
	split := func(ids []int64) (his, los []int32) {
		for _, id := range ids {
			hi, lo := interest(id)
			his, los = append(his, hi), append(los, lo)
		}
		return his, los
	}
	th, tl := split(take)
	dh, dl := split(drop)
	_, err := conn.Exec(ctx, `SELECT
	(SELECT count(pg_advisory_unlock_shared(h, l)) FROM unnest($3::int4[], $4::int4[]) AS u(h, l)),
	(SELECT count(pg_advisory_lock_shared(h, l)) FROM unnest($1::int4[], $2::int4[]) AS u(h, l))`, th, tl, dh, dl)
	if err != nil && isCode(err, "53200") {
		return errors.Join(ErrLockTableFull, err)
	}
	return err
}
