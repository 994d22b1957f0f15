package pglock

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var _ lock.Claimer = (*Lock)(nil)

// Claim implements lock.Claimer in one statement on a pooled connection,
// which it gives back at once: the claim is a row of leasehold_claims that
// lapses after ttl (see "Claims" in the package documentation). The token
// comes from the grants' sequence. Inspect and List show live claims like
// grants.
func (l *Lock) Claim(ctx context.Context, key string, ttl time.Duration) (token uint64, err error) {
	if err := backendkit.Validate(ctx, key, ttl, limits); err != nil {
		return 0, err
	}
	start := time.Now()
	defer func() { l.metrics.Attempt(ctx, start, err) }()
	if err := l.ensureSetup(ctx); err != nil {
		return 0, err
	}
	var t int64
	err = l.pool.QueryRow(ctx, l.sql.claim, l.id(key), l.namespace, []byte(key), l.owner, ms(ttl)).Scan(&t)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, backendkit.NotAcquired(key, 0)
	case err != nil:
		return 0, backendkit.Unavailable("pglock: claim", err)
	}
	return uint64(t), nil
}
