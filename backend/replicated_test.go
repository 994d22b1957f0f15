package backend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// acquireWithin takes key on l, retrying for up to d: the first calls
// after a failover may meet a closed connection.
func acquireWithin(t *testing.T, l lock.Lock, key string, d time.Duration) lock.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for {
		// A short ttl: a PostgreSQL failover quarantines the keys for the
		// longest ttl granted before it.
		h, err := l.TryAcquire(ctx, key, 2*time.Second)
		if err == nil {
			return h
		}
		select {
		case <-ctx.Done():
			t.Fatalf("TryAcquire(%s) for %v: %v", key, d, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A redis+sentinel:// URL opens the primary its Sentinels name, and the
// Lock follows it through a failover: no reopening.
func TestOpenRedisSentinel(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	l, closeFn, err := backend.Open(t.Context(), srv.SentinelURL()+"?db=2")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	h := acquireWithin(t, l, "before", time.Second)
	_ = h.Release(t.Context())
	srv.Failover(t, testenv.Handover)
	h = acquireWithin(t, l, "after", 30*time.Second)
	_ = h.Release(t.Context())
}

// A multi-host PostgreSQL DSN with target_session_attrs=read-write opens
// whichever member is the primary, and the pool reaches the new one after
// a failover without the application doing anything.
func TestOpenPostgresWithAStandby(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t, testenv.Replicas(1))
	l, closeFn, err := backend.Open(t.Context(), srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	h := acquireWithin(t, l, "before", time.Second)
	_ = h.Release(t.Context())
	srv.Failover(t, testenv.Crash)
	h = acquireWithin(t, l, "after", 30*time.Second)
	_ = h.Release(t.Context())
}

func TestOpenRedisSentinelErrors(t *testing.T) {
	ctx := t.Context()
	for _, url := range []string{
		"redis+sentinel://127.0.0.1:26379",         // no primary's name
		"redis+sentinel://127.0.0.1:26379/",        // no primary's name
		"redis+sentinel://127.0.0.1:26379/a/b",     // a path, not a name
		"redis+sentinel://127.0.0.1:26379/m?db=x",  // not a number
		"redis+sentinel://127.0.0.1:26379/m?db=-1", // not a number
		"redis+sentinel://127.0.0.1:26379/m?x=1",   // an unknown parameter
		"redis+sentinel:///m",                      // no Sentinel
	} {
		if _, _, err := backend.Open(ctx, url); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%q: %v, want ErrInvalidArgument", url, err)
		}
	}
}
