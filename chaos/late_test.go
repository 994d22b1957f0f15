package chaos_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// A grant whose reply arrives after its ttl is no grant: by then another
// owner may hold the key (the nemesis found it on etcd, seed 958328: a
// reply held up by a partition for 0.4 s past the grant's ValidUntil, and
// a handle handed out dead while a later token held the key). The proxy
// lets requests through and delays every reply past the ttl; no acquire
// may return a handle, and the key must be free again within its ttl and
// a second once the replies flow.
func TestNoGrantArrivesDead(t *testing.T) {
	type backend struct {
		name    string
		ttl     time.Duration
		connect func(t *testing.T) (*faultproxy.Proxy, lock.Lock)
	}
	backends := []backend{
		{"redis", 500 * time.Millisecond, func(t *testing.T) (*faultproxy.Proxy, lock.Lock) {
			p := faultproxy.Start(t, testenv.Redis(t).Addr())
			c := redis.NewClient(&redis.Options{Addr: p.Addr()})
			l, err := redislock.New(c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(); _ = c.Close() })
			return p, l
		}},
		{"postgres", time.Second, func(t *testing.T) (*faultproxy.Proxy, lock.Lock) {
			srv := testenv.Postgres(t)
			p := faultproxy.Start(t, srv.Addr())
			_, port, _ := net.SplitHostPort(p.Addr())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			l, err := pglock.NewFromDSN(ctx, strings.Replace(srv.DSN(), srv.Addr(), "127.0.0.1:"+port, 1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return p, l
		}},
		{"etcd", time.Second, func(t *testing.T) (*faultproxy.Proxy, lock.Lock) {
			p := faultproxy.Start(t, testenv.Etcd(t).Endpoints()[0])
			c, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			l, err := etcdlock.New(c, etcdlock.WithMinTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(); _ = c.Close() })
			return p, l
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			p, l := b.connect(t)
			key := "chaos/late/" + strconv.FormatInt(time.Now().UnixNano(), 36)
			type op struct {
				name string
				call func(ctx context.Context) (lock.Handle, error)
			}
			ops := []op{{"TryAcquire", func(ctx context.Context) (lock.Handle, error) { return l.TryAcquire(ctx, key, b.ttl) }}}
			if m, ok := l.(lock.MultiLock); ok {
				ops = append(ops, op{"TryAcquireAny", func(ctx context.Context) (lock.Handle, error) {
					return m.TryAcquireAny(ctx, []string{key, key}, b.ttl)
				}})
			}
			if q, ok := l.(lock.Queue); ok {
				ops = append(ops, op{"AcquireQueued", func(ctx context.Context) (lock.Handle, error) { return q.AcquireQueued(ctx, key, b.ttl) }})
			}
			for _, o := range ops {
				// Warm up on time: connections, scripts, a spare lease.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				h, err := o.call(ctx)
				if err != nil {
					cancel()
					t.Fatalf("%s on time: %v", o.name, err)
				}
				_ = h.Release(ctx)

				p.SetReplyDelay(b.ttl + 300*time.Millisecond)
				h, err = o.call(ctx)
				returned := time.Now()
				p.SetReplyDelay(0)
				if err == nil {
					t.Errorf("%s whose reply came late returned a handle valid until %v before it returned",
						o.name, returned.Sub(h.ValidUntil()))
					_ = h.Release(ctx)
				} else if !errors.Is(err, lock.ErrUnavailable) {
					t.Errorf("%s whose reply came late: %v; want lock.ErrUnavailable", o.name, err)
				}
				// Released, or expired at its ttl: free within ttl + 1 s.
				actx, acancel := context.WithTimeout(ctx, b.ttl+time.Second)
				h, err = lock.Acquire(actx, l, key, b.ttl)
				acancel()
				if err != nil {
					t.Fatalf("after %s's late grant, the key was not free within ttl + 1 s: %v", o.name, err)
				}
				_ = h.Release(ctx)
				cancel()
			}
		})
	}
}
