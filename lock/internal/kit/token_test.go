package kit

import (
	"context"
	"errors"
	"testing"
)

type valueKey struct{}

// TestTokenContext: a TokenContext carries its token as WithToken's
// context does, passes every other key and its cancellation through from
// its parent, and a WithToken made over it wins, as the nearer value.
func TestTokenContext(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), valueKey{}, "v"))
	var tc TokenContext
	tc.Set(parent, 1<<40)
	if tok, ok := Token(&tc); !ok || tok != 1<<40 {
		t.Fatalf("Token = %d %v, want %d", tok, ok, uint64(1<<40))
	}
	if v := tc.Value(valueKey{}); v != "v" {
		t.Fatalf("the parent's value = %v, want v", v)
	}
	if tok, ok := Token(WithToken(&tc, 7)); !ok || tok != 7 {
		t.Fatalf("Token of WithToken over it = %d %v, want 7", tok, ok)
	}
	if _, ok := Token(parent); ok {
		t.Fatal("the parent carries a token")
	}
	child, stop := context.WithCancelCause(&tc)
	defer stop(nil)
	boom := errors.New("boom")
	cancel(boom)
	<-child.Done()
	if !errors.Is(context.Cause(child), boom) {
		t.Fatalf("child's cause = %v, want the parent's", context.Cause(child))
	}
}

// BenchmarkTokenContext: what a Lease's context costs (the Lease made
// too), with its token from WithToken (a context of its own) and from the
// TokenContext in the Lease.
func BenchmarkTokenContext(b *testing.B) {
	type lease struct {
		ctx    context.Context
		cancel context.CancelCauseFunc
		tc     TokenContext
	}
	parent := context.Background()
	var sink *lease // a Lease lives on the heap
	defer func() { _ = sink }()
	b.Run("WithToken", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l := &lease{}
			l.ctx, l.cancel = context.WithCancelCause(WithToken(parent, 1<<40))
			l.cancel(nil)
			_, _ = Token(l.ctx)
			sink = l
		}
	})
	b.Run("TokenContext", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l := &lease{}
			l.tc.Set(parent, 1<<40)
			l.ctx, l.cancel = context.WithCancelCause(&l.tc)
			l.cancel(nil)
			_, _ = Token(l.ctx)
			sink = l
		}
	})
}
