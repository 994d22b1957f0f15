// Package kit holds what package lock and package backendkit share: the
// telemetry instruments, the token's context key, Sleep, and the hooks
// through which lock hands backendkit the functions whose only copy lives
// in lock (lock cannot import backendkit, which imports lock).
package kit

import (
	"context"
	"time"
)

// Hooks set by package lock when it is initialised (before any package
// that imports it), and read by backendkit. Each holds a func value of the
// type written beside it.
var (
	// AcquireWith is lock's waiting loop: func(context.Context, lock.Lock,
	// []string, func(context.Context) (lock.Handle, error), []lock.Option) (lock.Handle, error).
	AcquireWith any
	// HelperOption is func(lock.Common, *Telemetry) lock.Option.
	HelperOption any
	// CheckContext is func(context.Context) error.
	CheckContext any
	// Validate is func(context.Context, string, time.Duration, lock.Limits) error.
	Validate any
	// ValidateGroup is func(context.Context, []string, time.Duration, lock.Limits) error.
	ValidateGroup any
	// Lost is func(reason string) error.
	Lost any
)

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx's cause in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

type tokenKey struct{}

// WithToken returns a copy of ctx that carries a fencing token.
func WithToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// TokenContext is a context that carries a fencing token, as WithToken's
// does, made in place inside a struct that lives as long as the context
// (a Lease): it costs no allocation of its own, and reading the token
// makes none (Value answers a pointer to it). Set makes it; it must not
// be copied after.
type TokenContext struct {
	context.Context
	token uint64
}

// Set makes c carry token over parent.
func (c *TokenContext) Set(parent context.Context, token uint64) {
	c.Context, c.token = parent, token
}

// Value answers the token for Token, and defers every other key to the
// parent.
func (c *TokenContext) Value(key any) any {
	if key == (tokenKey{}) {
		return &c.token
	}
	return c.Context.Value(key)
}

// Token returns the fencing token carried by ctx, if any.
func Token(ctx context.Context) (uint64, bool) {
	switch t := ctx.Value(tokenKey{}).(type) {
	case uint64:
		return t, true
	case *uint64:
		return *t, true
	}
	return 0, false
}
