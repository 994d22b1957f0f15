package redislock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// go-redis applies a context's deadline and cancellation to its socket
// reads and writes only when the client sets ContextTimeoutEnabled; without
// it a call to a server that stopped answering waits for the client's
// ReadTimeout or WriteTimeout (3 to 5 s by default), well past a lease's
// ValidUntil. So, for a client that does not honour contexts, each call
// runs on its own goroutine and returns when ctx ends; the abandoned call
// finishes in the background within the client's timeouts, and its effect
// is what any unknown outcome is (an acquire it made expires with its ttl).

// honoursContext reports whether client bounds its calls by their context.
func honoursContext(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// within runs call and returns its error, or ctx's once ctx ends first.
func (l *Lock) within(ctx context.Context, call func() error) error {
	if l.ctxBound || ctx.Done() == nil {
		return call()
	}
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs script within ctx (see within).
func (l *Lock) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd // written by call; read only after call returned
	if err := l.within(ctx, func() error {
		cmd = script.Run(ctx, l.client, keys, args...)
		return nil
	}); err != nil {
		failed := redis.NewCmd(ctx)
		failed.SetErr(err)
		return failed
	}
	return cmd
}
