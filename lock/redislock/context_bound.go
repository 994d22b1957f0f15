package redislock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Every call ends when its context does, also on a client without
// ContextTimeoutEnabled (see internal/rediscall).

// within runs call and returns its error, or ctx's once ctx ends first.
func (l *Lock) within(ctx context.Context, call func() error) error {
	return l.bounds.Within(ctx, call)
}

// run runs script within ctx.
func (l *Lock) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return l.bounds.Run(ctx, l.client, script, keys, args...)
}
