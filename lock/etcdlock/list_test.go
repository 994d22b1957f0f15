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
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// List reads its keys in pages of at most 1,000, so that no single read
// of the server is as large as the number of grants: 2,300 grants are
// listed whole, sorted, in three range reads.
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
	holder := newLock(t, srv.Endpoints())
	prefix := fmt.Sprintf("list-pages/%d/", time.Now().UnixNano())
	const n = 2300
	var wg sync.WaitGroup
	next := atomic.Int32{}
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if _, err := holder.TryAcquire(t.Context(), fmt.Sprintf("%s%04d", prefix, i), time.Minute); err != nil {
					t.Error(err)
					return
				}
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
