package bench

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// errBusy is what an instance returns when the key is held (try) or when
// the library gave up waiting (redsync after its 32 tries).
var errBusy = errors.New("bench: key held")

// release gives a held key back.
type release func(context.Context) error

// instance is one library's lock with a client of its own, as one host has.
type instance struct {
	// try takes key if it is free, without waiting; errBusy if it is held.
	try func(ctx context.Context, key string) (release, error)
	// wait takes key, waiting the way the library's documentation
	// recommends, until ctx ends; blocked (which may be nil) is called once
	// the first attempt has failed. Nil for a floor, which does not wait.
	wait func(ctx context.Context, key string, blocked func()) (release, error)
}

// impl is one library on one backend.
type impl struct {
	backend, name string
	// new makes an instance; nil for leasehold, whose benchmarks go through
	// lock/locktest's shared helpers on lease instead.
	new func(b *testing.B) instance
	// lease makes a leasehold instance (leasehold only).
	lease func(b *testing.B) lock.Lock
	// floor marks a backend's raw floor, which cannot wait.
	floor bool
	// waitOnly marks a variant that differs from another impl only in how
	// it waits (its uncontended figure would repeat the other's).
	waitOnly bool
	// how: the configuration, as the report states it.
	how string
}

// impls lists every library on every backend, the servers started (or
// found) by internal/testkit/testenv and shared by all of them.
func impls(b *testing.B) []impl {
	rs, ps, es := testenv.Redis(b), testenv.Postgres(b), testenv.Etcd(b)
	leasehold := func(kind func(testing.TB) backends.Backend) func(*testing.B) lock.Lock {
		be := kind(b)
		return func(b *testing.B) lock.Lock { return be.New(b) }
	}
	return []impl{
		{backend: "redis", name: "floor", new: redisFloor(rs.Addr()), floor: true,
			how: "SET NX PX + compare-and-delete script; no fencing, cannot wait"},
		{backend: "redis", name: "leasehold", lease: leasehold(backends.Redis),
			how: "redislock.New(client); lock.Acquire waits in the key's queue in Redis, and a release hands the key to the first waiter (pub/sub message to its Lock)"},
		{backend: "redis", name: "bsm-redislock", new: bsmLock(rs.Addr(), 100*time.Millisecond),
			how: "Obtain; waiting with RetryStrategy LinearBackoff(100ms), as in its README"},
		{backend: "redis", name: "bsm-redislock-10ms", new: bsmLock(rs.Addr(), 10*time.Millisecond), waitOnly: true,
			how: "the same with LinearBackoff(10ms): a tighter poll, 10× the load on Redis while waiting"},
		{backend: "redis", name: "redsync", new: redsyncLock(rs.Addr()),
			how: "one node; defaults (32 tries, 50–250 ms random retry delay), expiry 30 s"},
		{backend: "postgres", name: "raw-advisory", new: pgRaw(ps.DSN()),
			how: "pg_try_advisory_lock / pg_advisory_lock (server queue) + pg_advisory_unlock on one connection"},
		{backend: "postgres", name: "leasehold", lease: leasehold(backends.Postgres),
			how: "pglock (pool of 32); lock.Acquire waits in the server's queue (pg_advisory_lock)"},
		{backend: "etcd", name: "floor", new: etcdFloor(es.Endpoints()), floor: true,
			how: "Txn put-if-absent + Delete; no lease, cannot wait"},
		{backend: "etcd", name: "leasehold", lease: leasehold(backends.Etcd),
			how: "etcdlock (min ttl 1 s); lock.Acquire waits on a watch"},
		{backend: "etcd", name: "concurrency-mutex", new: etcdMutex(es.Endpoints()),
			how: "concurrency.Mutex in a session (ttl 30 s) per instance; Lock waits on a watch, FIFO"},
	}
}

// leaseInstance is a leasehold lock as an instance, for the workloads that
// have no shared helper in lock/locktest.
func leaseInstance(l lock.Lock) instance {
	held := func(h lock.Handle, err error) (release, error) {
		if errors.Is(err, lock.ErrNotAcquired) {
			return nil, errBusy
		}
		if err != nil {
			return nil, err
		}
		return h.Release, nil
	}
	return instance{
		try: func(ctx context.Context, key string) (release, error) { return held(l.TryAcquire(ctx, key, ttl)) },
		wait: func(ctx context.Context, key string, _ func()) (release, error) {
			return held(lock.Acquire(ctx, l, key, ttl))
		},
	}
}

func newRedis(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

var compareAndDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func redisFloor(addr string) func(*testing.B) instance {
	return func(b *testing.B) instance {
		c := newRedis(b, addr)
		return instance{try: func(ctx context.Context, key string) (release, error) {
			v := rand.Int64()
			ok, err := c.SetNX(ctx, key, v, ttl).Result()
			if err != nil || !ok {
				return nil, errors.Join(err, errBusy)
			}
			return func(ctx context.Context) error { return compareAndDelete.Run(ctx, c, []string{key}, v).Err() }, nil
		}}
	}
}

// observedRetry is a bsm RetryStrategy that reports the first failed attempt.
type observedRetry struct {
	bsm.RetryStrategy
	blocked func()
}

func (o observedRetry) NextBackoff() time.Duration {
	if o.blocked != nil {
		o.blocked()
	}
	return o.RetryStrategy.NextBackoff()
}

func bsmLock(addr string, backoff time.Duration) func(*testing.B) instance {
	return func(b *testing.B) instance {
		c := bsm.New(newRedis(b, addr))
		obtain := func(ctx context.Context, key string, retry bsm.RetryStrategy) (release, error) {
			l, err := c.Obtain(ctx, key, ttl, &bsm.Options{RetryStrategy: retry})
			if errors.Is(err, bsm.ErrNotObtained) {
				return nil, errBusy
			}
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
		return instance{
			try: func(ctx context.Context, key string) (release, error) { return obtain(ctx, key, bsm.NoRetry()) },
			wait: func(ctx context.Context, key string, blocked func()) (release, error) {
				return obtain(ctx, key, observedRetry{bsm.LinearBackoff(backoff), blocked})
			},
		}
	}
}

func redsyncLock(addr string) func(*testing.B) instance {
	return func(b *testing.B) instance {
		rs := redsync.New(goredis.NewPool(newRedis(b, addr)))
		take := func(ctx context.Context, key string, try bool, blocked func()) (release, error) {
			m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithRetryDelayFunc(func(int) time.Duration {
				if blocked != nil {
					blocked()
				}
				// redsync's default delay: uniform in [50 ms, 250 ms).
				return time.Duration(50+rand.IntN(200)) * time.Millisecond
			}))
			lockFn := m.LockContext
			if try {
				lockFn = m.TryLockContext
			}
			if err := lockFn(ctx); err != nil {
				var taken *redsync.ErrTaken
				if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
					return nil, errBusy
				}
				return nil, err
			}
			return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
		}
		return instance{
			try: func(ctx context.Context, key string) (release, error) { return take(ctx, key, true, nil) },
			wait: func(ctx context.Context, key string, blocked func()) (release, error) {
				return take(ctx, key, false, blocked)
			},
		}
	}
}

// advisoryKey maps a key to a positive 31-bit advisory lock key, which
// pg_locks shows in objid.
func advisoryKey(key string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int64(h.Sum32() >> 1)
}

func pgRaw(dsn string) func(*testing.B) instance {
	return func(b *testing.B) instance {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		// observer sees from pg_locks when this connection waits.
		observer, err := pgxpool.New(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(observer.Close)
		unlock := func(k int64) release {
			return func(ctx context.Context) error {
				_, err := c.Exec(ctx, "SELECT pg_advisory_unlock($1)", k)
				return err
			}
		}
		return instance{
			try: func(ctx context.Context, key string) (release, error) {
				k := advisoryKey(key)
				var ok bool
				if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || !ok {
					return nil, errors.Join(err, errBusy)
				}
				return unlock(k), nil
			},
			wait: func(ctx context.Context, key string, blocked func()) (release, error) {
				k := advisoryKey(key)
				if blocked != nil {
					stop := observe(ctx, func(ctx context.Context) bool {
						var waiting bool
						_ = observer.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
							WHERE locktype = 'advisory' AND NOT granted AND classid = 0 AND objid = $1)`, k).Scan(&waiting)
						return waiting
					}, blocked)
					defer stop()
				}
				if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
					return nil, err
				}
				return unlock(k), nil
			},
		}
	}
}

// observe polls cond every millisecond until it holds, then calls then,
// for a library whose waiting loop offers no hook. stop ends the polling.
func observe(ctx context.Context, cond func(context.Context) bool, then func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if cond(ctx) {
				then()
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func newEtcd(b *testing.B, endpoints []string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func etcdFloor(endpoints []string) func(*testing.B) instance {
	return func(b *testing.B) instance {
		c := newEtcd(b, endpoints)
		return instance{try: func(ctx context.Context, key string) (release, error) {
			r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, "x")).Commit()
			if err != nil || !r.Succeeded {
				return nil, errors.Join(err, errBusy)
			}
			return func(ctx context.Context) error { _, err := c.Delete(ctx, key); return err }, nil
		}}
	}
}

func etcdMutex(endpoints []string) func(*testing.B) instance {
	return func(b *testing.B) instance {
		c := newEtcd(b, endpoints)
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return instance{
			try: func(ctx context.Context, key string) (release, error) {
				m := concurrency.NewMutex(s, key)
				if err := m.TryLock(ctx); err != nil {
					if errors.Is(err, concurrency.ErrLocked) {
						return nil, errBusy
					}
					return nil, err
				}
				return m.Unlock, nil
			},
			wait: func(ctx context.Context, key string, blocked func()) (release, error) {
				m := concurrency.NewMutex(s, key)
				if blocked != nil {
					// The Mutex waits once its own key is under the prefix
					// beside the holder's.
					stop := observe(ctx, func(ctx context.Context) bool {
						r, err := c.Get(ctx, key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
						return err == nil && r.Count >= 2
					}, blocked)
					defer stop()
				}
				if err := m.Lock(ctx); err != nil {
					return nil, err
				}
				return m.Unlock, nil
			},
		}
	}
}
