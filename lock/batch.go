package lock

import (
	"context"
	"fmt"
	"time"
)

// Batcher is implemented by backends that can keep many grants alive
// together, at a cost that grows with the number of batches rather than
// the number of grants: redislock renews a chunk of keys in one script (per
// Cluster slot), etcdlock puts a batch's grants on shared leases kept alive
// together, pglock holds many advisory locks on each of a few server
// sessions whose idle_session_timeout is their shared ttl, memlock renews
// them in one pass. Keeper uses it; most callers want a Keeper rather than
// a Batch.
type Batcher interface {
	// NewBatch opens a batch whose grants are made for ttl. The batch
	// holds whatever the backend shares between its grants (leases,
	// sessions) until Close.
	NewBatch(ctx context.Context, ttl time.Duration) (Batch, error)
}

// Batch is a set of grants of one backend that are renewed together.
//
// A grant made by the batch's TryAcquire is a full Handle: its Token,
// ValidUntil and Lost (where the backend has it) mean what they mean for
// any grant; its own Extend and Release act on it alone (Extend accepts
// any ttl within the backend's Limits, as any handle's does); and Renew
// renews it together with the others. Implementations are safe for
// concurrent use, and a Renew may run beside a TryAcquire, an Extend or a
// Release of one of its handles.
type Batch interface {
	// TryAcquire takes key for the batch's ttl if no one holds it, as
	// Lock.TryAcquire does, and returns ErrNotAcquired if someone does.
	TryAcquire(ctx context.Context, key string) (Handle, error)
	// Renew extends every grant in hs (made by this batch and not
	// released) for the batch's ttl, in a number of server round trips
	// that grows with the number of chunks (the backend states its chunk
	// size; no single server call does more than one chunk's work), not
	// with len(hs). It returns one outcome per handle, in the order of hs:
	// nil (renewed: the handle's ValidUntil has moved on), an error
	// matching ErrLost (that grant alone is gone; the others are not
	// affected by it), or another error (unknown: the grant may still be
	// held until its ValidUntil). A handle the batch cannot renew gets an
	// error matching ErrInvalidArgument, and a Keeper renews it on its own:
	// on etcd and PostgreSQL that is a handle not made by the batch; on
	// Redis and memory any handle of the same Lock can be renewed.
	Renew(ctx context.Context, hs []Handle) []error
	// Close ends the batch: it gives up what the batch itself holds (etcd
	// leases, PostgreSQL sessions), which ends the grants resting on it;
	// where grants share nothing (Redis, memory) they stay until released
	// or expired. Later TryAcquire and Renew calls fail. It is safe to
	// call more than once. Keeper.Close releases every lease first.
	Close(ctx context.Context) error
}

// ClaimRequest is one claim of ClaimEach: key for ttl.
type ClaimRequest struct {
	Key string
	TTL time.Duration
}

// ClaimResult is the outcome of one ClaimRequest: the claim's fencing
// token, or the error (ErrNotAcquired when the key is claimed already).
type ClaimResult struct {
	Token uint64
	Err   error
}

// EachClaimer is implemented by backends that can make many independent
// claims (see Claimer) in one round trip per chunk (per Cluster slot on
// Redis). Timers claim every tick due at one instant this way.
type EachClaimer interface {
	// ClaimEach claims each request's key for its ttl, independently of
	// the others, and returns one result per request, in order. An error
	// that stopped the whole call (the server unreachable) is in the
	// result of every request it left unanswered.
	ClaimEach(ctx context.Context, reqs []ClaimRequest) []ClaimResult
}

// ClaimEach makes the claims of reqs on l: in a few round trips on an
// EachClaimer, otherwise one Claim after another. Each request's key and
// ttl are checked against l's Limits first; a refused request's result
// carries the error and the others go on.
func ClaimEach(ctx context.Context, l Lock, reqs []ClaimRequest) []ClaimResult {
	res := make([]ClaimResult, len(reqs))
	if l == nil {
		for i := range res {
			res[i].Err = fmt.Errorf("%w: nil Lock", ErrInvalidArgument)
		}
		return res
	}
	lim := LimitsOf(l)
	valid := make([]ClaimRequest, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i, r := range reqs {
		if err := validate(ctx, r.Key, r.TTL, lim); err != nil {
			res[i].Err = err
			continue
		}
		valid = append(valid, r)
		at = append(at, i)
	}
	if len(valid) == 0 {
		return res
	}
	if c, ok := l.(EachClaimer); ok {
		out := fitAnswers(l, c.ClaimEach(ctx, valid), len(valid), func(r *ClaimResult, err error) { r.Err = err }, nil)
		for j, r := range out {
			res[at[j]] = r
		}
		return res
	}
	for j, r := range valid {
		res[at[j]].Token, res[at[j]].Err = Claim(ctx, l, r.Key, r.TTL)
	}
	return res
}
