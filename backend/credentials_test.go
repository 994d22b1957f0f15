package backend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

const secret = "TopSecret-7d1f"

// requirePass makes a dedicated Redis server (every member of a cluster)
// require secret, as a production server does.
func requirePass(t *testing.T, srv *testenv.Server) {
	for _, addr := range srv.Endpoints() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		if err := c.ConfigSet(t.Context(), "requirepass", secret).Err(); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
}

// useLock takes and releases a key through a backend opened from url.
func useLock(t *testing.T, url string) error {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	l, closeFn, err := backend.Open(ctx, url)
	if err != nil {
		return err
	}
	defer closeFn()
	h, err := l.TryAcquire(ctx, "credentials-test", time.Minute)
	if err != nil {
		return err
	}
	return h.Release(ctx)
}

// TestRedisCredentials: the password of a redis:// and of a
// redis+cluster:// URL is used (the cluster's was dropped: NOAUTH), and a
// wrong one fails without printing either.
func TestRedisCredentials(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := testenv.NewRedis(t)
		requirePass(t, srv)
		if err := useLock(t, "redis://:"+secret+"@"+srv.Addr()); err != nil {
			t.Fatalf("with the password: %v", err)
		}
		err := useLock(t, "redis://:wrong-"+secret+"@"+srv.Addr())
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("with a wrong password: %v", err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		srv := testenv.NewRedis(t, testenv.Members(3))
		requirePass(t, srv)
		url := "redis+cluster://:" + secret + "@" + strings.Join(srv.Endpoints(), ",")
		if err := useLock(t, url); err != nil {
			t.Fatalf("with the password: %v", err)
		}
		if err := useLock(t, "redis+cluster://"+strings.Join(srv.Endpoints(), ",")); err == nil {
			t.Fatal("without the password: no error")
		}
	})
}

// TestEtcdCredentials: etcd://user:password@… authenticates (the
// credentials were ignored).
func TestEtcdCredentials(t *testing.T) {
	srv := testenv.NewEtcd(t)
	ctx := t.Context()
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserAdd(ctx, "root", secret); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	eps := strings.Join(srv.Endpoints(), ",")
	if err := useLock(t, "etcd://root:"+secret+"@"+eps); err != nil {
		t.Fatalf("with the credentials: %v", err)
	}
	if err := useLock(t, "etcd://root:wrong-"+secret+"@"+eps); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("with a wrong password: %v", err)
	}
}

// TestOpenErrorsHideSecrets: no error of Open contains the URL's password,
// whatever the URL's form; the bad ones are ErrInvalidArgument.
func TestOpenErrorsHideSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		url     string
		invalid bool
	}{
		{"redis://:" + secret + "@127.0.0.1:badport/", true},
		{"rediss://user:" + secret + "@[::1", true},
		{"redis://:" + secret + "@127.0.0.1:6379/notadb", true},
		{"redis://:" + secret + "@127.0.0.1:1/", false},
		{"redis+cluster://:" + secret + "@127.0.0.1:1/0", true},
		{"postgres://u:" + secret + "@127.0.0.1:badport/db", true},
		{"postgres://u@127.0.0.1:1/db?password=" + secret, false},
		{"postgres://u@127.0.0.1:1/db?sslmode=bogus&password=" + secret, true},
		{"host=127.0.0.1 port=1 user=u password=" + secret, true},
		{"host=127.0.0.1 password='" + secret + "'", true},
		{"etcd://u:" + secret + "@127.0.0.1:2379/path", true},
		{"etcd://:" + secret + "@127.0.0.1:2379", true},
		{"gopher://u:" + secret + "@x", true},
	} {
		l, closeFn, err := backend.Open(ctx, c.url)
		if err == nil { // pglock connects at first use
			_, err = l.TryAcquire(ctx, "k", time.Minute)
			_ = closeFn()
		}
		if err == nil {
			t.Errorf("%s: no error", backend.Redact(c.url))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows the password: %v", err)
		}
		if c.invalid != errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, ErrInvalidArgument %v", backend.Redact(c.url), err, c.invalid)
		}
		if r := backend.Redact(c.url); strings.Contains(r, secret) {
			t.Errorf("Redact shows the password: %s", r)
		}
	}
}
