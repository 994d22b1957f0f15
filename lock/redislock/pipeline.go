package redislock

import (
	"context"

	"github.com/leasehold-go/leasehold/internal/rediscall"
)

// renewChunk is the most keys one script of Batch.Renew works on, so that
// no call blocks Redis for long: a renewal costs the server about 1.3 µs a
// key, so a chunk runs for about 1.3 ms (docs/redis.md, "Scale").
const renewChunk = 1000

// claimChunk is the most claims one script of ClaimEach makes: a claim
// (two keys written) costs the server about 5.6 µs, so a chunk runs for
// about 0.4 ms. Redis reads a client's pipeline 16 KB at a time, once per
// pass of its event loop, and runs each script that read completed, whole:
// a chunk of 64 is about 12 KB, so a pass runs about 80 claims of a
// pipeline (0.45 ms), where one of 250 (48 KB) ran whole in the pass that
// completed it, about 1.5 ms, while the server's other clients waited
// (see the package doc). A variable for the tests.
var claimChunk = 64

// scriptCall is one script call of a pipeline (see pipeline).
type scriptCall = rediscall.Call

// pipeline runs calls in one pipeline (see rediscall.Bounds.Pipeline):
// under WithReplicaAcks, those of a write are acknowledged (releases are
// not).
func (l *Lock) pipeline(ctx context.Context, calls []scriptCall, write bool) {
	l.bounds.Pipeline(ctx, l.client, l.acks, calls, write)
}
