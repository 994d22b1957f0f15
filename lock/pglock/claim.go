package pglock

import (
	"context"
	"errors"
	"slices"
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

var _ lock.EachClaimer = (*Lock)(nil)

// ClaimChunk is the most claims of one ClaimEach statement.
const ClaimChunk = 1000

// ClaimEach implements lock.EachClaimer: the claims of reqs, each as Claim
// makes it (same table, tokens from the same sequence, same semantics), in
// one statement per ClaimChunk requests, the chunks one after the other on
// a pooled connection given back at once. A statement holds the row locks
// of its chunk's claims until it ends, no longer; it takes them in the
// order of the keys' ids, so concurrent calls never deadlock. A key asked
// twice in one call is claimed by its first request; the later ones get
// lock.ErrNotAcquired (or the first's error). Each request's key and ttl
// are checked as Claim's; a refused one's result carries the error.
func (l *Lock) ClaimEach(ctx context.Context, reqs []lock.ClaimRequest) []lock.ClaimResult {
	res := make([]lock.ClaimResult, len(reqs))
	type claim struct {
		at int
		id int64
	}
	var (
		send  []claim
		first = make(map[int64]int, len(reqs)) // id → the request sent for it
		dups  []claim
	)
	for i, r := range reqs {
		if err := backendkit.Validate(ctx, r.Key, r.TTL, limits); err != nil {
			res[i].Err = err
			continue
		}
		id := l.id(r.Key)
		if _, dup := first[id]; dup {
			dups = append(dups, claim{i, id})
			continue
		}
		first[id] = i
		send = append(send, claim{i, id})
	}
	if len(send) == 0 {
		return res
	}
	if err := l.ensureSetup(ctx); err != nil {
		for _, c := range send {
			res[c.at].Err = err
		}
	} else {
		for chunk := range slices.Chunk(send, ClaimChunk) {
			ids := make([]int64, len(chunk))
			keys := make([][]byte, len(chunk))
			ttls := make([]int64, len(chunk))
			for j, c := range chunk {
				r := reqs[c.at]
				ids[j], keys[j] = c.id, []byte(r.Key)
				ttls[j] = int64((r.TTL + time.Millisecond - 1) / time.Millisecond)
			}
			tokens, err := l.claimChunk(ctx, ids, keys, ttls)
			for _, c := range chunk {
				switch t, ok := tokens[c.id]; {
				case err != nil:
					res[c.at].Err = err
				case ok:
					res[c.at].Token = t
				default:
					res[c.at].Err = backendkit.NotAcquired(reqs[c.at].Key, 0)
				}
			}
		}
	}
	for _, d := range dups {
		if res[d.at].Err = res[first[d.id]].Err; res[d.at].Err == nil {
			res[d.at].Err = backendkit.NotAcquired(reqs[d.at].Key, 0)
		}
	}
	return res
}

// claimChunk runs the claimEach statement over one chunk and returns the
// tokens of the claims taken, by id.
func (l *Lock) claimChunk(ctx context.Context, ids []int64, keys [][]byte, ttls []int64) (tokens map[int64]uint64, err error) {
	start := time.Now()
	defer func() { l.metrics.Attempt(ctx, start, err) }()
	rows, err := l.pool.Query(ctx, l.sql.claimEach, ids, keys, ttls, l.namespace, l.owner)
	if err != nil {
		return nil, backendkit.Unavailable("pglock: claim", err)
	}
	defer rows.Close()
	tokens = make(map[int64]uint64, len(ids))
	for rows.Next() {
		var id, t int64
		if err := rows.Scan(&id, &t); err != nil {
			return nil, backendkit.Unavailable("pglock: claim", err)
		}
		tokens[id] = uint64(t)
	}
	if err := rows.Err(); err != nil {
		return nil, backendkit.Unavailable("pglock: claim", err)
	}
	return tokens, nil
}
