package pglock

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Inspect implements lock.Inspector in one round trip: pg_locks joined with
// the holding session's activity. Owner, token and ttl come from the
// session's application_name; Remaining is the ttl less the time the
// session has been idle, as idle_session_timeout counts it (the ttl itself
// while a statement runs on it, and 0 when the role reading it may not see
// the holder's activity: grant it pg_read_all_stats). Since is the grant's
// server time, to the millisecond. Of a key's shared grants it reports the
// one that expires first.
func (l *Lock) Inspect(ctx context.Context, key string) (lock.Grant, bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return lock.Grant{}, false, err
	}
	if err := l.ensureSetup(ctx); err != nil {
		return lock.Grant{}, false, err
	}
	rows, err := l.pool.Query(ctx, l.sql.inspect, l.id(key))
	if err != nil {
		return lock.Grant{}, false, backendkit.Unavailable("pglock: inspect", err)
	}
	defer rows.Close()
	var (
		first lock.Grant
		found bool
	)
	for rows.Next() {
		var r grantRow
		if err := rows.Scan(&r.app, &r.rem, &r.shared, &r.group); err != nil {
			return lock.Grant{}, false, backendkit.Unavailable("pglock: inspect", err)
		}
		if g := r.grant(key); !found || g.Remaining < first.Remaining {
			first, found = g, true
		}
	}
	if err := rows.Err(); err != nil {
		return lock.Grant{}, false, backendkit.Unavailable("pglock: inspect", err)
	}
	return first, found, nil
}

// grantRow is a row of the inspect and list statements.
type grantRow struct {
	app    *string
	rem    *int64
	shared bool
	group  *string // "<token> <group>" for a key of a group
}

func (r grantRow) grant(key string) lock.Grant {
	g := parseGrant(key, r.app, r.rem)
	g.Shared = r.shared
	if r.group != nil {
		tok, grp, _ := strings.Cut(*r.group, " ")
		if grp == "0" { // a batch's key (batch.go), not a group's
			grp = ""
		}
		if t, err := strconv.ParseUint(tok, 10, 64); err == nil {
			g.Token, g.Group = t, grp
		}
	}
	return g
}

// parseGrant reads "<token> <ttl ms> <since ms> <owner>" from a holder's
// application_name. A session of another program that holds the same
// advisory lock shows its own application_name as the owner.
func parseGrant(key string, app *string, rem *int64) lock.Grant {
	g := lock.Grant{Key: key}
	if app == nil {
		return g
	}
	g.Owner = *app
	parts := strings.SplitN(*app, " ", 4)
	if len(parts) != 4 {
		return g
	}
	tok, err1 := strconv.ParseUint(parts[0], 10, 64)
	ttl, err2 := strconv.ParseInt(parts[1], 10, 64)
	since, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return g
	}
	g.Owner, g.Token, g.Since = parts[3], tok, time.UnixMilli(since)
	g.Remaining = backendkit.RemainingMillis(ttl)
	if rem != nil {
		g.Remaining = backendkit.RemainingMillis(*rem)
	}
	return g
}

// List implements lock.Inspector: the held locks of this namespace whose
// key names start with prefix, one Grant per shared grant and per key of
// a group. Names come from the table leasehold_keys,
// where each Lock instance records a key the first time it tries it.
func (l *Lock) List(ctx context.Context, prefix string) ([]lock.Grant, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	if err := l.ensureSetup(ctx); err != nil {
		return nil, err
	}
	rows, err := l.pool.Query(ctx, l.sql.list, l.namespace, []byte(prefix))
	if err != nil {
		return nil, backendkit.Unavailable("pglock: list", err)
	}
	defer rows.Close()
	var out []lock.Grant
	for rows.Next() {
		var (
			key []byte
			r   grantRow
		)
		if err := rows.Scan(&key, &r.app, &r.rem, &r.shared, &r.group); err != nil {
			return nil, backendkit.Unavailable("pglock: list", err)
		}
		out = append(out, r.grant(string(key)))
	}
	if err := rows.Err(); err != nil {
		return nil, backendkit.Unavailable("pglock: list", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ForceRelease ends the session that holds key (pg_terminate_backend, which
// needs the holder's role, pg_signal_backend or a superuser) and wakes the
// key's waiters; it reports whether there was a holder. The holder's
// handle learns of it at once (LossNotifier) or at its next Extend or
// Release. An operator's tool: fencing still protects the resource from
// the evicted holder, which may have been paused mid-write.
func (l *Lock) ForceRelease(ctx context.Context, key string) (bool, error) {
	if err := backendkit.ValidateKey(ctx, key); err != nil {
		return false, err
	}
	if err := l.ensureSetup(ctx); err != nil {
		return false, err
	}
	id := l.id(key)
	var n int64
	var notified *string
	if err := l.pool.QueryRow(ctx, l.sql.force, id, l.channel, payload(id)).Scan(&n, &notified); err != nil {
		return false, backendkit.Unavailable("pglock: force release", err)
	}
	return n > 0, nil
}
