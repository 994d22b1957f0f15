package redislock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
)

// Every call ends when its context does, also on a client without
// ContextTimeoutEnabled (see internal/rediscall).

// within runs call and returns its error, or ctx's once ctx ends first.
func (l *Lock) within(ctx context.Context, call func() error) error {
	return l.bounds.Within(ctx, call)
}

// run runs script within ctx. The hot paths build their calls themselves
// (see handle), boxing nothing per call.
func (l *Lock) run(ctx context.Context, script *rediscall.Script, keys []string, args ...any) *redis.Cmd {
	return l.bounds.Eval(ctx, l.client, script, callOf(script, keys, args))
}

// callOf is the call of script with keys and args (see rediscall.Script).
func callOf(script *rediscall.Script, keys []string, args []any) []any {
	return script.Call(keys, args...)
}
