package faultproxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// Op is one call to check against a server that stopped answering.
type Op struct {
	Name string
	Call func(context.Context) error
}

// ExpectWithinDeadline runs each op with a context of deadline and fails t
// when one does not end with lock.ErrUnavailable (or the deadline's error)
// within deadline + slack.
func ExpectWithinDeadline(t testing.TB, deadline, slack time.Duration, ops ...Op) {
	t.Helper()
	for _, op := range ops {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err := op.Call(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, lock.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a stalled server: %v, want ErrUnavailable", op.Name, err)
		}
		if took > deadline+slack {
			t.Errorf("%s on a stalled server returned after %v, past its %v deadline", op.Name, took, deadline)
		}
	}
}
