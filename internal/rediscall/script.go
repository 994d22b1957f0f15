package rediscall

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script whose calls the caller builds as one []any: the
// three values of Start, then the keys, then the arguments. A caller that
// builds them once, or from pointers to fields of its own (go-redis writes
// a *string or *int64 as it writes the value), boxes nothing per call, and
// Eval adds only the command itself. The arguments are only read, also by
// the fallback to EVAL, so one slice may serve concurrent calls.
type Script struct {
	src  string
	hash any // hex SHA-1 of src, boxed once
}

// NewScript returns the Script of src.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, hash: hex.EncodeToString(sum[:])}
}

// Start appends to call the start of a call with numKeys keys: EVALSHA,
// the script's hash, numKeys (0 to 255 box without allocating).
func (s *Script) Start(call []any, numKeys int) []any {
	return append(call, "evalsha", s.hash, numKeys)
}

// Call is the call of s with keys and args (see Script), for a caller
// that builds it per call.
func (s *Script) Call(keys []string, args ...any) []any {
	call := s.Start(make([]any, 0, 3+len(keys)+len(args)), len(keys))
	for _, k := range keys {
		call = append(call, k)
	}
	return append(call, args...)
}

// Processor runs a command: a client or a pipeline.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// command is the command of args, routed by its first key.
func command(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if n, _ := args[2].(int); n > 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// run sends args by EVALSHA and, when the server does not have the script
// (a restart, SCRIPT FLUSH), once more by EVAL.
func (s *Script) run(ctx context.Context, c Processor, args []any) *redis.Cmd {
	cmd := command(ctx, args)
	_ = c.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		eval := append([]any{"eval", s.src}, args[2:]...)
		cmd = command(ctx, eval)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// Eval runs the call args of s (see Script) on client within ctx (see
// Within). On a client that honours contexts, or under a context that never
// ends, it allocates nothing of its own but the command.
func (b Bounds) Eval(ctx context.Context, client Processor, s *Script, args []any) *redis.Cmd {
	if b.honoured || ctx.Done() == nil {
		return s.run(ctx, client, args)
	}
	// As Within does, with a channel and a goroutine per call and nothing
	// more (Keep renews under a deadline).
	done := make(chan *redis.Cmd, 1)
	go s.runTo(ctx, done, client, args)
	select {
	case cmd := <-done:
		return cmd
	case <-ctx.Done():
		return failed(ctx, ctx.Err())
	}
}

func (s *Script) runTo(ctx context.Context, done chan<- *redis.Cmd, c Processor, args []any) {
	done <- s.run(ctx, c, args)
}

// WriteEval is Write for a call built as for Eval.
func (b Bounds) WriteEval(ctx context.Context, client redis.UniversalClient, a Acks, s *Script, args []any) (cmd *redis.Cmd, acked error) {
	if a.N == 0 {
		return b.Eval(ctx, client, s, args), nil
	}
	return b.acked(ctx, client, a, firstKey(args),
		func(p redis.Pipeliner) *redis.Cmd {
			cmd := command(ctx, args)
			_ = p.Process(ctx, cmd)
			return cmd
		},
		func(node *redis.Client) error { return node.ScriptLoad(ctx, s.src).Err() })
}

func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// Hash is the script's SHA-1 in hex, as EVALSHA names it.
func (s *Script) Hash() string { return s.hash.(string) }

// Source is the script's text, as EVAL sends it.
func (s *Script) Source() string { return s.src }
