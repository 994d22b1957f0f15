// Package backend opens a lock.Lock from a URL, for programs that let their
// operator choose the backend (the examples, the leasehold CLI):
//
//	mem://               a new in-process table (memlock)
//	mem://NAME           the in-process table NAME, shared by every Open of it in this process
//	redis://[:password@]host:port[/db]    rediss:// for TLS   (redislock)
//	redis+cluster://[user:password@]host:port,host:port   Redis Cluster (redislock)
//	redis+sentinel://[:password@]host:port[,host:port…]/master-name[?db=N]   a primary found through its Sentinels (redislock)
//	postgres://user:pass@host:port/db?... postgresql:// too     (pglock)
//	postgres://user:pass@host1:port1,host2:port2/db?target_session_attrs=read-write   a primary and its standbys
//	etcd://[user:password@]host:port,host:port   etcd endpoints (etcdlock)
//
// Credentials in the URL are used, for every scheme that has them; a URL
// part a scheme cannot use (a database path on a cluster or on etcd) is
// refused with ErrInvalidArgument rather than ignored. Errors never
// contain the URL's secrets: they show it as Redact does.
//
// WithCommon's owner identity, logger and telemetry providers go to the
// backend whole. The returned close function releases what Open made
// (clients, pools, subscriptions); it does not release grants.
package backend

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

var (
	tablesMu sync.Mutex
	tables   = map[string]*memlock.Lock{}
)

// Option configures Open.
type Option func(*config) error

type config struct{ common lock.Common }

// WithCommon sets the owner identity, logger and telemetry providers of the
// backend that Open makes (see lock.Common).
func WithCommon(c lock.Common) Option {
	return func(cfg *config) error { cfg.common = cfg.common.Merge(c); return nil }
}

// Open returns the backend that rawURL names, and a function that closes it.
func Open(ctx context.Context, rawURL string, opts ...Option) (lock.Lock, func() error, error) {
	var cfg config
	if err := backendkit.Apply("backend", &cfg, opts); err != nil {
		return nil, nil, err
	}
	l, closeFn, err := open(ctx, rawURL, cfg.common)
	return l, closeFn, RedactError(err, rawURL)
}

func open(ctx context.Context, rawURL string, common lock.Common) (lock.Lock, func() error, error) {
	if !strings.Contains(rawURL, "://") {
		return nil, nil, backendkit.Invalid("backend", "backend URL %s has no scheme (mem://, redis://, postgres://, etcd://, ...)", Redact(rawURL))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, backendkit.Invalid("backend", "backend URL %s: %w", Redact(rawURL), urlCause(err))
	}
	nop := func() error { return nil }
	switch u.Scheme {
	case "mem":
		l, err := openMem(u.Host+u.Path, common)
		if err != nil {
			return nil, nil, err
		}
		return l, nop, nil
	case "redis", "rediss", "redis+cluster", "redis+sentinel":
		c, err := redisClient(rawURL, u)
		if err != nil {
			return nil, nil, err
		}
		return openRedis(ctx, c, common)
	case "postgres", "postgresql":
		l, err := pglock.NewFromDSN(ctx, rawURL, pglock.WithCommon(common))
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	case "etcd":
		cfg, err := etcdConfig(u)
		if err != nil {
			return nil, nil, err
		}
		c, err := clientv3.New(cfg)
		if err != nil {
			return nil, nil, backendkit.Unavailable("backend: etcd", err)
		}
		l, err := etcdlock.New(c, etcdlock.WithCommon(common))
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return l, closeBoth(l, c), nil
	}
	return nil, nil, backendkit.Invalid("backend", "backend URL scheme %q is not one of mem, redis, rediss, redis+cluster, redis+sentinel, postgres, etcd", u.Scheme)
}

// RedisClient returns a go-redis client for a redis://, rediss://,
// redis+cluster:// or redis+sentinel:// URL, as Open makes it: for
// programs that keep more than locks on the same Redis (a jobs registry,
// a queue). Its calls end with their context. An error matches
// lock.ErrInvalidArgument and shows the URL as Redact does.
func RedisClient(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, backendkit.Invalid("backend", "backend URL %s: %w", Redact(rawURL), urlCause(err))
	}
	c, err := redisClient(rawURL, u)
	return c, RedactError(err, rawURL)
}

func redisClient(rawURL string, u *url.URL) (redis.UniversalClient, error) {
	switch u.Scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, backendkit.Invalid("backend", "backend URL %s: %w", Redact(rawURL), urlCause(err))
		}
		o.ContextTimeoutEnabled = true // calls end with their context (see redislock)
		return redis.NewClient(o), nil
	case "redis+cluster":
		o, err := clusterOptions(u)
		if err != nil {
			return nil, err
		}
		return redis.NewClusterClient(o), nil
	case "redis+sentinel":
		o, err := sentinelOptions(u)
		if err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(o), nil
	}
	return nil, backendkit.Invalid("backend", "backend URL scheme %q is not one of redis, rediss, redis+cluster, redis+sentinel", u.Scheme)
}

// urlCause returns the cause of a URL parser's error, which quotes the
// whole URL (its password included).
func urlCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// hosts splits a URL's host list (host:port,host:port), refusing an empty
// one.
func hosts(u *url.URL) ([]string, error) {
	var out []string
	for h := range strings.SplitSeq(u.Host, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil, backendkit.Invalid("backend", "backend URL %s names no host", Redact(u.String()))
	}
	return out, nil
}

// noExtras refuses the parts of a URL a scheme cannot use, rather than
// ignoring them.
func noExtras(u *url.URL, what string) error {
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return backendkit.Invalid("backend", "backend URL %s: %s takes no database path, query or fragment", Redact(u.String()), what)
	}
	return nil
}

// clusterOptions returns the go-redis options of a redis+cluster:// URL
// u: its hosts as the seed nodes, and its user and password (ACL user and
// password, or only a password as with requirepass).
func clusterOptions(u *url.URL) (*redis.ClusterOptions, error) {
	if err := noExtras(u, "redis+cluster"); err != nil {
		return nil, err
	}
	addrs, err := hosts(u)
	if err != nil {
		return nil, err
	}
	o := &redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	return o, nil
}

// sentinelOptions returns the go-redis options of a redis+sentinel:// URL
// u: its hosts are the Sentinels, its path the name under which they know
// the primary, its password that of the primary and its replicas, and its
// query at most the database number (db=N).
func sentinelOptions(u *url.URL) (*redis.FailoverOptions, error) {
	addrs, err := hosts(u)
	if err != nil {
		return nil, err
	}
	master := strings.TrimPrefix(u.Path, "/")
	if master == "" || strings.Contains(master, "/") || u.Fragment != "" {
		return nil, backendkit.Invalid("backend", "backend URL %s: redis+sentinel takes the primary's name as its path (redis+sentinel://host:port,host:port/name)", Redact(u.String()))
	}
	o := &redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, ContextTimeoutEnabled: true}
	for k, v := range u.Query() {
		if k != "db" || len(v) != 1 {
			return nil, backendkit.Invalid("backend", "backend URL %s: redis+sentinel takes no query but db=N", Redact(u.String()))
		}
		db, err := strconv.Atoi(v[0])
		if err != nil || db < 0 {
			return nil, backendkit.Invalid("backend", "backend URL %s: db=%q is not a database number", Redact(u.String()), v[0])
		}
		o.DB = db
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	return o, nil
}

// etcdConfig returns the clientv3 configuration of an etcd:// URL: its
// endpoints, and its user and password when it has them (etcd's
// authentication; etcd refuses a user while its authentication is off).
func etcdConfig(u *url.URL) (clientv3.Config, error) {
	if err := noExtras(u, "etcd"); err != nil {
		return clientv3.Config{}, err
	}
	eps, err := hosts(u)
	if err != nil {
		return clientv3.Config{}, err
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
		if cfg.Username == "" {
			return clientv3.Config{}, backendkit.Invalid("backend", "backend URL %s: etcd authentication needs a user name (etcd://user:password@host:port)", Redact(u.String()))
		}
	}
	return cfg, nil
}

func openMem(name string, c lock.Common) (*memlock.Lock, error) {
	if name == "" {
		return memlock.New(memlock.WithCommon(c))
	}
	tablesMu.Lock()
	defer tablesMu.Unlock()
	t, ok := tables[name]
	if !ok {
		var err error
		if t, err = memlock.New(); err != nil {
			return nil, err
		}
		tables[name] = t
	}
	return t.Share(memlock.WithCommon(c))
}

func openRedis(ctx context.Context, c redis.UniversalClient, common lock.Common) (lock.Lock, func() error, error) {
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, nil, backendkit.Unavailable("backend: redis", err)
	}
	l, err := redislock.New(c, redislock.WithCommon(common))
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
