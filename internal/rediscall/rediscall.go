// Package rediscall bounds go-redis calls by their context.
//
// go-redis applies a context's deadline and cancellation to its socket
// reads and writes only when the client sets ContextTimeoutEnabled; without
// it a call to a server that stopped answering waits for the client's
// ReadTimeout or WriteTimeout (3 to 5 s by default), past any lease that
// depended on it. For a client that does not honour contexts, Within runs
// each call on a goroutine of its own and returns when the context ends;
// the abandoned call finishes in the background within the client's
// timeouts, and its effect is what any unknown outcome is.
package rediscall

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Bounds runs calls to one client within their context.
type Bounds struct {
	honoured bool // the client bounds calls by their context itself
}

// For returns the Bounds of client.
func For(client redis.UniversalClient) Bounds {
	switch c := client.(type) {
	case *redis.Client:
		return Bounds{c.Options().ContextTimeoutEnabled}
	case *redis.ClusterClient:
		return Bounds{c.Options().ContextTimeoutEnabled}
	case *redis.Ring:
		return Bounds{c.Options().ContextTimeoutEnabled}
	}
	return Bounds{}
}

// Within runs call and returns its error, or ctx's once ctx ends first.
func (b Bounds) Within(ctx context.Context, call func() error) error {
	if b.honoured || ctx.Done() == nil {
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

// Run runs script on client within ctx (see Within).
func (b Bounds) Run(ctx context.Context, client redis.Scripter, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var cmd *redis.Cmd // written by the call; read only after it returned
	if err := b.Within(ctx, func() error {
		cmd = script.Run(ctx, client, keys, args...)
		return nil
	}); err != nil {
		return failed(ctx, err)
	}
	return cmd
}
