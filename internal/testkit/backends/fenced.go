package backends

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fenced is a resource on a backend's own server that applies a write only
// when its token is above every token it applied before, checked by the
// server in one atomic step: the resource side of fencing, as package
// lock's documentation describes it — a Redis compare script, a conditional
// UPDATE, an etcd Txn. A process that was paused past its lease and writes
// with its old token is refused by the server, whatever it believes.
type Fenced interface {
	// Write stores token as the resource's newest if it is above the one
	// stored (none counts as 0); accepted says whether it was.
	Write(ctx context.Context, token uint64) (accepted bool, err error)
	Close() error
}

// Fence returns the fenced resource called name on b's server, closed at
// the end of the test. Every process that asks for the same name (a child
// with FenceFromEnv) writes to the same resource. memlock has none.
func (b Backend) Fence(t testing.TB, name string) Fenced {
	t.Helper()
	f, err := fenceFrom(func(k string) string {
		for _, kv := range b.Env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// FenceFromEnv returns the fenced resource called name in a child process
// started with Backend.Env.
func FenceFromEnv(name string) (Fenced, error) { return fenceFrom(os.Getenv, name) }

func fenceFrom(get func(string) string, name string) (Fenced, error) {
	switch kind := get(EnvName); kind {
	case "redis":
		return &redisFence{redis.NewClient(&redis.Options{Addr: get("LEASEHOLD_REDIS_ADDR")}), "leasehold-test/fence/" + name}, nil
	case "postgres":
		return newPGFence(get("LEASEHOLD_PG_DSN"), name)
	case "etcd":
		c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(get("LEASEHOLD_ETCD_ENDPOINTS"), ","), DialTimeout: dialTimeout})
		if err != nil {
			return nil, err
		}
		return &etcdFence{c, "leasehold-test/fence/" + name}, nil
	default:
		return nil, fmt.Errorf("backends: %s=%q has no fenced resource", EnvName, kind)
	}
}

// redisCompareAndSet stores ARGV[1] if it is a larger decimal than the
// stored one: longer, or as long and later in order (exact for any uint64,
// unlike Lua's double-precision numbers).
var redisCompareAndSet = redis.NewScript(`
local cur = redis.call('GET', KEYS[1]) or '0'
local new = ARGV[1]
if #new > #cur or (#new == #cur and new > cur) then
	redis.call('SET', KEYS[1], new)
	return 1
end
return 0`)

type redisFence struct {
	c   *redis.Client
	key string
}

func (f *redisFence) Write(ctx context.Context, token uint64) (bool, error) {
	n, err := redisCompareAndSet.Run(ctx, f.c, []string{f.key}, strconv.FormatUint(token, 10)).Int()
	return n == 1, err
}

func (f *redisFence) Close() error { return f.c.Close() }

type pgFence struct {
	c    *pgx.Conn
	name string
}

func newPGFence(dsn, name string) (*pgFence, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	// Processes that start together must not race on CREATE TABLE.
	err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7406853)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS leasehold_test_fence (name text PRIMARY KEY, token numeric NOT NULL)`)
		return err
	})
	if err != nil {
		_ = c.Close(ctx)
		return nil, err
	}
	return &pgFence{c, name}, nil
}

func (f *pgFence) Write(ctx context.Context, token uint64) (bool, error) {
	tag, err := f.c.Exec(ctx, `INSERT INTO leasehold_test_fence AS f (name, token) VALUES ($1, $2::numeric)
		ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token WHERE f.token < EXCLUDED.token`,
		f.name, strconv.FormatUint(token, 10))
	return tag.RowsAffected() == 1, err
}

func (f *pgFence) Close() error { return f.c.Close(context.Background()) }

type etcdFence struct {
	c   *clientv3.Client
	key string
}

// Write compares zero-padded decimals, whose order as strings is their
// order as numbers.
func (f *etcdFence) Write(ctx context.Context, token uint64) (bool, error) {
	v := fmt.Sprintf("%020d", token)
	put := clientv3.OpPut(f.key, v)
	resp, err := f.c.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(f.key), "=", 0)).
		Then(put).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(f.key), "<", v)}, []clientv3.Op{put}, nil)).
		Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded || resp.Responses[0].GetResponseTxn().Succeeded, nil
}

func (f *etcdFence) Close() error { return f.c.Close() }
