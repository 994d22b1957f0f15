package leader_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// hidden wraps a Lock and hides its capabilities, its owner among them.
type hidden struct{ lock.Lock }

// electedIdentity runs an election on l until its first term and returns
// the term's Identity.
func electedIdentity(t *testing.T, l lock.Lock, opts ...lock.Option) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan leader.Term, 1)
	done := make(chan error, 1)
	go func() {
		done <- leader.Run(ctx, l, "identity", func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}, append(opts, leader.OnElected(func(term leader.Term) { got <- term }))...)
	}()
	var term leader.Term
	select {
	case term = <-got:
	case err := <-done:
		t.Fatalf("Run returned before a term: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return term.Identity
}

// Term.Identity follows lock.OwnerOf, as jobs and timers do: the backend's
// owner when it has one (memlock), else the configured owner (a wrapper
// that hides the backend's); it was empty for the wrapper before.
func TestTermIdentityIsTheOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := memlock.New(lock.WithOwner("backend-owner"))
		if got := electedIdentity(t, l, lock.WithOwner("configured")); got != "backend-owner" {
			t.Errorf("memlock: Identity %q, want the backend's owner %q", got, "backend-owner")
		}
		if got := electedIdentity(t, hidden{l}, lock.WithOwner("configured")); got != "configured" {
			t.Errorf("wrapper that hides the owner: Identity %q, want the configured owner %q", got, "configured")
		}
		if got := electedIdentity(t, hidden{l}); got == "" {
			t.Error("wrapper that hides the owner, no WithOwner: empty Identity, want the default owner (lock.NewOwner)")
		}
	})
}
