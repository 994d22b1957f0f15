package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/lock/pglock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// scaleTTL is the ttl of BenchmarkScaleLeases's leases: 30 s (3 s under
// -short, so that the smoke run's short hold sees renewals).
func scaleTTL() time.Duration { return workload(30*time.Second, 3*time.Second) }

// roundTrips counts a client's requests to its server: rts are the
// exchanges that wait for a reply (a pipeline, a pgx batch and a unary
// RPC are one each; each message sent on a stream is one), calls the
// commands, statements and RPC messages in them.
type roundTrips struct{ rts, calls atomic.Int64 }

func (c *roundTrips) snapshot() (rts, calls int64) { return c.rts.Load(), c.calls.Load() }

// go-redis hook.
func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.rts.Add(1)
		c.calls.Add(1)
		return next(ctx, cmd)
	}
}
func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.rts.Add(1)
		c.calls.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// pgx tracer: a statement outside a batch is a round trip; a batch is one.
func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if ctx.Value(inBatch{}) == nil {
		c.rts.Add(1)
	}
	c.calls.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.rts.Add(1)
	return context.WithValue(ctx, inBatch{}, true)
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.calls.Add(1)
}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

type inBatch struct{}

// gRPC interceptors (etcd).
func (c *roundTrips) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.rts.Add(1)
	c.calls.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}
func (c *roundTrips) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, c: c}, nil
}

type countedStream struct {
	grpc.ClientStream
	c *roundTrips
}

func (s *countedStream) SendMsg(m any) error {
	s.c.rts.Add(1)
	s.c.calls.Add(1)
	return s.ClientStream.SendMsg(m)
}

// scaleBackend is one backend of BenchmarkScaleLeases: its Lock, with its
// client's requests counted, and a probe of its server's latency from a
// client of its own.
type scaleBackend struct {
	l     lock.Lock
	rt    *roundTrips
	ping  func(ctx context.Context) error        // nil: no server
	conns func(ctx context.Context) (int, error) // server sessions holding the leases, or nil
	full  func(err error) bool                   // the server can hold no more leases
	close func()
}

func scaleRedis(b *testing.B) scaleBackend {
	srv := testenv.NewRedis(b)
	rt := &roundTrips{}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	c.AddHook(rt)
	l, err := redislock.New(c)
	if err != nil {
		b.Fatal(err)
	}
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	return scaleBackend{l: l, rt: rt,
		ping:  func(ctx context.Context) error { return probe.Ping(ctx).Err() },
		close: func() { _ = c.Close(); _ = probe.Close() }}
}

func scaleEtcd(b *testing.B) scaleBackend {
	srv := testenv.NewEtcd(b)
	rt := &roundTrips{}
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rt.unary), grpc.WithChainStreamInterceptor(rt.stream)}})
	if err != nil {
		b.Fatal(err)
	}
	l, err := etcdlock.New(c)
	if err != nil {
		b.Fatal(err)
	}
	probe, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return scaleBackend{l: l, rt: rt,
		ping:  func(ctx context.Context) error { _, err := probe.Get(ctx, "bench/probe"); return err },
		close: func() { _ = c.Close(); _ = probe.Close() }}
}

func scalePostgres(b *testing.B) scaleBackend {
	srv := testenv.NewPostgres(b)
	rt := &roundTrips{}
	cfg, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.Tracer = rt
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	l, err := pglock.New(pool)
	if err != nil {
		b.Fatal(err)
	}
	probe, err := pgx.Connect(context.Background(), srv.DSN())
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex // the probe's connection is used by one call at a time
	return scaleBackend{l: l, rt: rt,
		ping: func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			_, err := probe.Exec(ctx, "SELECT 1")
			return err
		},
		// A connection of its own: the probe's ends when a ping is cut
		// short by the probe's stop (pgx closes a connection whose query
		// is cancelled).
		conns: func(ctx context.Context) (int, error) {
			c, err := pgx.Connect(ctx, srv.DSN())
			if err != nil {
				return 0, err
			}
			defer c.Close(ctx)
			var n int
			err = c.QueryRow(ctx, "SELECT count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory'").Scan(&n)
			return n, err
		},
		full:  func(err error) bool { return errors.Is(err, pglock.ErrLockTableFull) },
		close: func() { pool.Close(); _ = probe.Close(context.Background()) }}
}

func scaleMemlock(b *testing.B) scaleBackend {
	l, err := memlock.New()
	if err != nil {
		b.Fatal(err)
	}
	return scaleBackend{l: l, rt: &roundTrips{}, close: func() {}}
}

// scaleSize is LEASEHOLD_SCALE_LEASES and LEASEHOLD_SCALE_HOLD, or their
// defaults: 100,000 leases held 5 minutes (2,000 and 4 s, four renewal
// periods, under -short).
func scaleSize(b *testing.B) (n int, hold time.Duration) {
	n, hold = workload(100_000, 2_000), workload(5*time.Minute, 4*time.Second)
	if v := os.Getenv("LEASEHOLD_SCALE_LEASES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("LEASEHOLD_SCALE_LEASES=%q: want a positive count", v)
		}
	}
	if v := os.Getenv("LEASEHOLD_SCALE_HOLD"); v != "" {
		var err error
		if hold, err = time.ParseDuration(v); err != nil || hold <= 0 {
			b.Fatalf("LEASEHOLD_SCALE_HOLD=%q: want a positive duration", v)
		}
	}
	return n, hold
}

// BenchmarkScaleLeases: one process holds N leases (ttl 30 s) through one
// lock.Keeper for a while, on each backend: on PostgreSQL as many as the
// server's lock table takes, up to N. It reports what the holding costs:
//
//   - rt/period and calls/period: the client's round trips (a pipeline, a
//     batch, an RPC or a stream message is one) and server calls (scripts,
//     statements, RPC messages) per renewal period (ttl/3) while holding;
//   - goroutines: how many the leases added (a constant, not N);
//   - heap-B/lease: the live heap the leases added, over N;
//   - lost: leases lost while holding (must be 0);
//   - probe-p99-ms: the server's latency for another client meanwhile
//     (PING, SELECT 1, an etcd Get), which must stay under 5 ms;
//   - sessions: PostgreSQL sessions holding the advisory locks.
//
// Run it alone, with -benchtime 1x (a run takes the hold time plus the
// acquiring: about 7 minutes a backend at the defaults):
//
//	go -C bench test -run '^$' -bench '^BenchmarkScaleLeases$' -benchtime 1x -timeout 60m
//
// LEASEHOLD_SCALE_LEASES and LEASEHOLD_SCALE_HOLD change N and the hold.
func BenchmarkScaleLeases(b *testing.B) {
	for _, c := range []struct {
		name string
		make func(*testing.B) scaleBackend
	}{{"redis", scaleRedis}, {"etcd", scaleEtcd}, {"postgres", scalePostgres}, {"memlock", scaleMemlock}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				scaleLeases(b, c.make(b))
			}
		})
	}
}

func scaleLeases(b *testing.B, be scaleBackend) {
	defer be.close()
	n, hold := scaleSize(b)
	ctx := context.Background()
	prefix := uniqueKey("bench/scale")
	before := measure()
	k, err := lock.NewKeeper(be.l, scaleTTL())
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		start := time.Now()
		if err := k.Close(ctx); err != nil {
			b.Errorf("Keeper.Close: %v", err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "close-s")
	}()

	// Acquire N leases from 32 goroutines; on PostgreSQL, until the
	// server's lock table is full.
	leases := make([]*lock.Lease, n)
	var next atomic.Int64
	var full atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for range 32 {
		wg.Go(func() {
			for !full.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				le, err := k.TryAcquire(ctx, prefix+"/"+strconv.Itoa(i))
				switch {
				case err == nil:
					leases[i] = le
				case be.full != nil && be.full(err):
					full.Store(true)
				default:
					b.Errorf("lease %d: %v", i, err)
					full.Store(true)
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	held := leases[:0:0]
	for _, le := range leases {
		if le != nil {
			held = append(held, le)
		}
	}
	b.ReportMetric(float64(len(held)), "leases")
	b.ReportMetric(time.Since(start).Seconds(), "acquire-s")
	after := measure()
	b.ReportMetric((after.heap-before.heap)/float64(len(held)), "heap-B/lease")
	b.ReportMetric(after.goroutines-before.goroutines, "goroutines")

	// Hold them, measuring the renewals and the server's latency.
	var stopProbe func() (time.Duration, time.Duration)
	if be.ping != nil {
		stopProbe = startProbe(b, be.ping)
	}
	rts0, calls0 := be.rt.snapshot()
	time.Sleep(hold)
	rts, calls := be.rt.snapshot()
	periods := float64(hold) / float64(scaleTTL()/3)
	b.ReportMetric(float64(rts-rts0)/periods, "rt/period")
	b.ReportMetric(float64(calls-calls0)/periods, "calls/period")
	if stopProbe != nil {
		p50, p99 := stopProbe()
		b.ReportMetric(float64(p50)/float64(time.Millisecond), "probe-p50-ms")
		b.ReportMetric(float64(p99)/float64(time.Millisecond), "probe-p99-ms")
	}
	if be.conns != nil {
		if s, err := be.conns(ctx); err != nil {
			b.Error(err)
		} else {
			b.ReportMetric(float64(s), "sessions")
		}
	}
	lost := 0
	for _, le := range held {
		if le.Err() != nil {
			if lost == 0 {
				b.Errorf("lease %s lost: %v", le.Handle().Key(), le.Err())
			}
			lost++
		}
	}
	b.ReportMetric(float64(lost), "lost")
	fmt.Fprintf(os.Stderr, "scale: %d leases held %v, %d lost\n", len(held), hold, lost)
}
