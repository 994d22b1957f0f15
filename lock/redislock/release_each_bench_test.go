package redislock_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// releaseTrips counts the round trips that release grants: a command, or
// a pipeline, that runs one of redislock.ReleaseScripts.
type releaseTrips struct{ n atomic.Int64 }

func isRelease(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 || cmd.Name() != "evalsha" {
		return false
	}
	sha, _ := args[1].(string)
	return slices.Contains(redislock.ReleaseScripts, sha)
}

func (r *releaseTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *releaseTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isRelease(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (r *releaseTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, isRelease) {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// BenchmarkRedisKeeperRelease: a Keeper's Close of 10,000 leases, and
// 10,000 concurrent Lease.Release, on Redis; it reports the release round
// trips per op (release-trips/op). Run with a fixed count: -benchtime 3x.
func BenchmarkRedisKeeperRelease(b *testing.B) {
	c := newClient(b, testenv.Redis(b).Addr())
	rec := &releaseTrips{}
	c.AddHook(rec)
	l := newLock(b, c)
	locktest.BenchKeeperRelease(b, l, 10_000, rec.n.Load)
}
