package lock

import "context"

type tokenKey struct{}

// ContextWithToken returns a copy of ctx that carries a fencing token.
// Keep, Do and the packages above lock use it so that user code finds the
// token of the grant it runs under with TokenFrom.
func ContextWithToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenFrom returns the fencing token carried by ctx, if any. Pass it to
// the protected resource, which must reject a token lower than the highest
// it has seen (see the package documentation for patterns).
func TokenFrom(ctx context.Context) (uint64, bool) {
	t, ok := ctx.Value(tokenKey{}).(uint64)
	return t, ok
}
