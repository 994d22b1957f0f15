package lock

import (
	"context"

	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

// TokenFrom returns the fencing token carried by ctx, if any: Keep, Do and
// the packages above lock (leader, timers, jobs) put the token of the grant
// that the work runs under there. Pass it to the protected resource, which
// must reject a token lower than the highest it has seen (see the package
// documentation for patterns).
func TokenFrom(ctx context.Context) (uint64, bool) { return kit.Token(ctx) }
