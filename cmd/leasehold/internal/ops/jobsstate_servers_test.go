package ops_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// countingConn counts the bytes read from the server.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func countingDial(n *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, n}, nil
	}
}

// TestJobsStateMovesNoPayload: on Redis and PostgreSQL, with 200 expired,
// 5 unexpired and 10 dead jobs of 10 KB each, one refresh of the jobs
// view (limit 10) reads less than one payload's worth of bytes from the
// server: the bytes are counted on the client's own connections (exact,
// whatever else the server serves), after a first refresh that loads the
// scripts and prepares the statements. It read about 200 KB before the
// listings were payload-free (10 expired and 10 dead payloads; with
// limit 100 and 3,000 expired, 30 MB).
func TestJobsStateMovesNoPayload(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T, read *atomic.Int64) listed
	}{
		{"redis", func(t *testing.T, read *atomic.Int64) listed {
			c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr(), Dialer: countingDial(read)})
			t.Cleanup(func() { _ = c.Close() })
			r, err := redisjobs.New(c, "ops-test:"+t.Name()+":"+time.Now().Format("150405.000000000"))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}},
		{"postgres", func(t *testing.T, read *atomic.Int64) listed {
			cfg, err := pgxpool.ParseConfig(testenv.Postgres(t).DSN())
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.DialFunc = countingDial(read)
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			r, err := pgjobs.New(pool, fmt.Sprintf("ops_test_jobs_%d", time.Now().UnixNano()))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var read atomic.Int64
			reg := tc.open(t, &read)
			const payloadSize, expired, dead = 10 << 10, 200, 10
			fill(t, reg, payloadSize, expired, dead)
			src, err := ops.Open(t.Context(), ops.Config{Backend: "mem://"})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			rec := record(reg)
			src.Jobs = rec
			if _, err := src.JobsState(t.Context(), 10); err != nil {
				t.Fatal(err)
			}
			rec.reset()
			read.Store(0)
			v, err := src.JobsState(t.Context(), 10)
			if err != nil {
				t.Fatal(err)
			}
			got := read.Load()
			t.Logf("one refresh read %d bytes from the server", got)
			rec.checkBounded(t, 10)
			if got >= payloadSize {
				t.Errorf("one refresh of the jobs view read %d bytes from the server, want less than one payload (%d)", got, payloadSize)
			}
			if len(v.Expired) != 10 || v.ExpiredMore != expired-10 || len(v.InFlight) != 0 || v.InFlightMore != 5 || len(v.Dead) != dead {
				t.Errorf("view: %d expired (+%d), %d in flight (+%d), %d dead", len(v.Expired), v.ExpiredMore, len(v.InFlight), v.InFlightMore, len(v.Dead))
			}
		})
	}
}

// fill tracks expired jobs, 5 unexpired and dead ones, each with a
// payload of size bytes.
func fill(t *testing.T, reg listed, size, expired, dead int) {
	t.Helper()
	ctx := t.Context()
	payload := []byte(strings.Repeat("p", size))
	for i := range dead + expired {
		id := fmt.Sprintf("old-%03d", i)
		if i < dead {
			id = fmt.Sprintf("dead-%03d", i)
		}
		if _, err := reg.Track(ctx, jobs.Job{ID: id, Payload: payload, Owner: "worker"}, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := reg.Track(ctx, jobs.Job{ID: fmt.Sprintf("new-%d", i), Payload: payload, Owner: "worker"}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// The registry's clock decides when they have expired: poll it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := reg.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.Expired == int64(dead+expired) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts %+v: the jobs did not expire", c)
		}
		<-time.After(10 * time.Millisecond)
	}
	due, err := reg.Expired(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range due {
		if !strings.HasPrefix(j.ID, "dead-") {
			t.Fatalf("expired %s before the dead-* jobs", j.ID)
		}
		if err := reg.Bury(ctx, j.Ref(), "test"); err != nil {
			t.Fatal(err)
		}
	}
}
