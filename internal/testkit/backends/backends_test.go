package backends_test

import (
	"fmt"
	"math"
	"path"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A backend whose server is missing skips its own subtest, not the others.
func TestEachSkipsOneBackendAlone(t *testing.T) {
	missing := func(t testing.TB) backends.Backend {
		t.Skip("no server (as testenv skips outside CI)")
		return backends.Backend{}
	}
	var ran []string
	t.Run("each", func(t *testing.T) {
		backends.Each(t, []func(testing.TB) backends.Backend{missing, backends.Memlock}, func(t *testing.T, b backends.Backend) {
			ran = append(ran, b.Name)
		})
	})
	if len(ran) != 1 || ran[0] != "memlock" {
		t.Fatalf("ran %v, want memlock after the missing backend skipped", ran)
	}
}

// Each names a subtest as the backend is named.
func TestEachNames(t *testing.T) {
	backends.Each(t, backends.All(t), func(t *testing.T, b backends.Backend) {
		if got := path.Base(t.Name()); got != b.Name {
			t.Fatalf("subtest %q runs backend %q", got, b.Name)
		}
		if b.Slack <= 0 {
			t.Fatalf("no stated slack")
		}
	})
}

// The fenced resource applies a token only above every one applied
// before, per name, on each networked backend.
func TestFenced(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		name := fmt.Sprintf("fenced-%s-%d", t.Name(), time.Now().UnixNano())
		f, other := b.Fence(t, name), b.Fence(t, name+"/other")
		ctx := t.Context()
		for i, c := range []struct {
			f      backends.Fenced
			token  uint64
			accept bool
		}{
			{f, 5, true}, {f, 3, false}, {f, 5, false}, {other, 4, true}, {f, 6, true},
			{f, 10, true}, {f, 9, false}, // 10 after 9 as strings would be refused
			{f, math.MaxUint64 - 1, true}, {f, math.MaxUint64 - 2, false}, {f, math.MaxUint64, true},
			{other, 3, false}, {other, 7, true},
		} {
			ok, err := c.f.Write(ctx, c.token)
			if err != nil {
				t.Fatalf("write %d (%d): %v", i, c.token, err)
			}
			if ok != c.accept {
				t.Fatalf("write %d of token %d: accepted %v, want %v", i, c.token, ok, c.accept)
			}
		}
		// A second client (another process's view) sees the same state.
		if ok, err := b.Fence(t, name).Write(ctx, math.MaxUint64-1); err != nil || ok {
			t.Fatalf("another client's stale write: %v, %v", ok, err)
		}
	})
}
