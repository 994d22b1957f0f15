package etcdlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// List reads its keys in pages of at most 1,000, so that no single read
// of the server is as large as the number of grants: 2,300 grants are
// listed whole, sorted, in three range reads.
//
// The test then releases its grants and closes its Lock, and checks that
// no lease of its own is left on the server. It used to leave its 2,300
// leases of a minute to expire together: etcd revokes at most 1,000
// expired leases a second, so for about 2.3 s every other lease that
// expired waited behind them, and a later test's 1 s grant (in the
// conformance suite, under -count) freed 0.5 s past its bound.
func TestListReadsInPages(t *testing.T) {
	srv := testenv.Etcd(t)
	var ranges atomic.Int32
	cfg := clientConfig(srv.Endpoints())
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/Range") {
			ranges.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := etcdlock.New(c, etcdlock.WithMinTTL(testMinTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := leaseCount(t.Context(), t, c)
	holder := newLock(t, srv.Endpoints())
	prefix := fmt.Sprintf("list-pages/%d/", time.Now().UnixNano())
	const n = 2300
	var wg sync.WaitGroup
	next := atomic.Int32{}
	var mu sync.Mutex
	var held []lock.Handle
	defer func() { // before c's Close (defers run last first)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i, err := range lock.ReleaseEach(ctx, holder, held) {
			if err != nil {
				t.Errorf("Release of grant %d: %v", i, err)
			}
		}
		_ = holder.Close() // revokes its spares, and waits for the other leases' revokes
		if after := leaseCount(ctx, t, c); after > before {
			t.Errorf("%d leases on the server before the test, %d after it: it left leases behind to expire", before, after)
		}
	}()
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				h, err := holder.TryAcquire(t.Context(), fmt.Sprintf("%s%04d", prefix, i), time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				held = append(held, h)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	ranges.Store(0)
	gs, err := l.List(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != n {
		t.Fatalf("List returned %d grants, want %d", len(gs), n)
	}
	for i, g := range gs {
		if want := fmt.Sprintf("%s%04d", prefix, i); g.Key != want || g.Remaining <= 0 {
			t.Fatalf("grant %d: %q (remaining %v), want %q", i, g.Key, g.Remaining, want)
		}
	}
	if r := ranges.Load(); r != 3 {
		t.Fatalf("List made %d range reads for %d keys, want 3 pages of at most 1,000", r, n)
	}
}

// leaseCount is the number of leases on the server.
func leaseCount(ctx context.Context, t *testing.T, c *clientv3.Client) int {
	t.Helper()
	resp, err := c.Leases(ctx)
	if err != nil {
		t.Error(err)
		return 0
	}
	return len(resp.Leases)
}
