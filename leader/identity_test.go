package leader_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// hidden wraps a Lock and hides its capabilities, its owner among them.
type hidden struct{ lock.Lock }

// electedOwner runs an election on l until its first term and returns the
// term's Owner.
func electedOwner(t *testing.T, l lock.Lock, opts ...leader.Option) string {
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
	return term.Owner
}

// A term's owner is the one its grant is stored with: the Lock's when it
// states one (lock.Owned), and a configured owner that contradicts it is
// refused (it used to be ignored silently, so that logs and OnElected named
// an owner that Observe and the CLI never showed). A Lock that does not
// state an owner (a wrapper that hides the backend's) reports the
// configured one, or a default one (lock.NewOwner).
func TestTermOwnerIsTheLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New(memlock.WithCommon(lock.Common{Owner: "backend-owner"})))
		if got := electedOwner(t, l); got != "backend-owner" {
			t.Errorf("memlock, no configured owner: Owner %q, want the backend's %q", got, "backend-owner")
		}
		if got := electedOwner(t, l, leader.WithCommon(lock.Common{Owner: "backend-owner"})); got != "backend-owner" {
			t.Errorf("memlock, the same owner configured: Owner %q, want %q", got, "backend-owner")
		}

		elected := false
		err := leader.Run(t.Context(), l, "identity", func(context.Context) error {
			elected = true
			return nil
		}, leader.WithCommon(lock.Common{Owner: "configured"}))
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "leader: ") ||
			!strings.Contains(err.Error(), `"configured"`) || !strings.Contains(err.Error(), `"backend-owner"`) || elected {
			t.Errorf("memlock, another owner configured: Run = %v (elected %v), want a leader error matching ErrInvalidArgument that names both owners", err, elected)
		}
		// Two WithCommon options merge: a later one without an Owner
		// keeps the earlier one's.
		err = leader.Run(t.Context(), l, "identity", func(context.Context) error { return nil },
			leader.WithCommon(lock.Common{Owner: "configured"}), leader.WithCommon(lock.Common{}))
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("memlock, another owner configured then a WithCommon without one: Run = %v, want ErrInvalidArgument", err)
		}
		if _, ok, err := leader.Observe(t.Context(), l, "identity"); ok || err != nil {
			t.Errorf("a refused Run campaigned: Observe = %v, %v", ok, err)
		}

		if got := electedOwner(t, hidden{l}, leader.WithCommon(lock.Common{Owner: "configured"})); got != "configured" {
			t.Errorf("wrapper that hides the owner: Owner %q, want the configured owner %q", got, "configured")
		}
		if got := electedOwner(t, hidden{l}); got == "" || got == "backend-owner" {
			t.Errorf("wrapper that hides the owner, none configured: Owner %q, want a default owner (lock.NewOwner)", got)
		}
		err = leader.Run(t.Context(), hidden{l}, "identity", func(context.Context) error { return nil },
			leader.WithCommon(lock.Common{Owner: "bad\x00owner"}))
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("wrapper that hides the owner, an invalid owner configured: Run = %v, want ErrInvalidArgument", err)
		}
	})
}
