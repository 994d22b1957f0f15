package backend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestOpen(t *testing.T) {
	ctx := t.Context()
	srv := testenv.Redis(t)
	for _, url := range []string{"mem://", "mem://shared", "redis://" + srv.Addr() + "/0", testenv.Postgres(t).DSN(), "etcd://" + strings.Join(testenv.Etcd(t).Endpoints(), ",")} {
		l, closeFn, err := backend.Open(ctx, url, backend.WithCommon(lock.Common{Owner: "tester"}))
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		h, err := l.TryAcquire(ctx, "open/"+url, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if g, ok, err := l.(lock.Inspector).Inspect(ctx, h.Key()); err != nil || !ok || g.Owner != "tester" {
			t.Fatalf("%s: Inspect %+v %v %v", url, g, ok, err)
		}
		_ = h.Release(ctx)
		if err := closeFn(); err != nil {
			t.Fatalf("%s: close: %v", url, err)
		}
	}
	// Two opens of one named table share its grants. (The table lives as
	// long as the process: a name of its own per run.)
	table := fmt.Sprintf("mem://table-%d", time.Now().UnixNano())
	a, _, _ := backend.Open(ctx, table)
	b, _, _ := backend.Open(ctx, table)
	h, err := a.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(ctx)
	if _, err := b.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("%s opened twice: %v", table, err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for _, url := range []string{"", "nope://x", "localhost:6379", "redis://[::1"} {
		if _, _, err := backend.Open(ctx, url); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%q: %v, want ErrInvalidArgument", url, err)
		}
	}
	if _, _, err := backend.Open(ctx, "mem://", nil); !errors.Is(err, lock.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "backend: invalid argument: ") {
		t.Errorf("nil option: %v, want backend's ErrInvalidArgument", err)
	}
	if _, _, err := backend.Open(ctx, "mem://", backend.WithCommon(lock.Common{Owner: "bad\nowner"})); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("invalid owner: %v, want ErrInvalidArgument", err)
	}
	if _, _, err := backend.Open(ctx, "redis://127.0.0.1:1"); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("unreachable redis: %v, want ErrUnavailable", err)
	}
}
