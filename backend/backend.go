// Package backend opens a lock.Lock from a URL, for programs that let their
// operator choose the backend (the examples, the leasehold CLI):
//
//	mem://               a new in-process table (memlock)
//	mem://NAME           the in-process table NAME, shared by every Open of it in this process
//	redis://[:password@]host:port[/db]    rediss:// for TLS   (redislock)
//	redis+cluster://host:port,host:port   Redis Cluster       (redislock)
//	postgres://user:pass@host:port/db?... postgresql:// too     (pglock)
//	etcd://host:port,host:port            etcd endpoints      (etcdlock)
//
// Options of package lock (WithOwner, WithLogger, ...) are passed through.
// The returned close function releases what Open made (clients, pools,
// subscriptions); it does not release grants.
package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

var (
	tablesMu sync.Mutex
	tables   = map[string]*memlock.Lock{}
)

// Open returns the backend that rawURL names, and a function that closes it.
func Open(ctx context.Context, rawURL string, opts ...lock.Option) (lock.Lock, func() error, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: backend URL %q: %w", lock.ErrInvalidArgument, rawURL, err)
	}
	nop := func() error { return nil }
	switch u.Scheme {
	case "mem":
		return openMem(u.Host+u.Path, opts), nop, nil
	case "redis", "rediss":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", lock.ErrInvalidArgument, err)
		}
		o.ContextTimeoutEnabled = true // calls end with their context (see redislock)
		return openRedis(ctx, redis.NewClient(o), opts)
	case "redis+cluster":
		addrs := strings.Split(u.Host, ",")
		return openRedis(ctx, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}), opts)
	case "postgres", "postgresql":
		l, err := pglock.NewFromDSN(ctx, rawURL, opts...)
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(u.Host, ","), DialTimeout: 5 * time.Second})
		if err != nil {
			return nil, nil, lock.Unavailable("backend: etcd", err)
		}
		l, err := etcdlock.New(c, opts...)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return l, closeBoth(l, c), nil
	case "":
		return nil, nil, fmt.Errorf("%w: backend URL %q has no scheme (mem://, redis://, ...)", lock.ErrInvalidArgument, rawURL)
	}
	return nil, nil, fmt.Errorf("%w: backend URL scheme %q is not one of mem, redis, rediss, redis+cluster, postgres, etcd", lock.ErrInvalidArgument, u.Scheme)
}

func openMem(name string, opts []lock.Option) lock.Lock {
	if name == "" {
		return memlock.New(opts...)
	}
	tablesMu.Lock()
	defer tablesMu.Unlock()
	t, ok := tables[name]
	if !ok {
		t = memlock.New()
		tables[name] = t
	}
	return t.Share(opts...)
}

func openRedis(ctx context.Context, c redis.UniversalClient, opts []lock.Option) (lock.Lock, func() error, error) {
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, nil, lock.Unavailable("backend: redis", err)
	}
	l, err := redislock.New(c, opts...)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return l, closeBoth(l, c), nil
}

// closeBoth closes a Lock, then the client it was made on.
func closeBoth(l, client io.Closer) func() error {
	return func() error { return errors.Join(l.Close(), client.Close()) }
}
