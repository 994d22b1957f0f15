package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// cutReplicas cuts every replica of srv off from the primary for about d:
// each stops answering (DEBUG SLEEP), and the primary drops its link to
// them (CLIENT KILL TYPE replica), so that no write made meanwhile reaches
// them (a stalled replica would still read what was sent before it woke).
func cutReplicas(t *testing.T, srv *testenv.Server, d time.Duration) {
	t.Helper()
	primary := srv.Primary(t)
	defer func() {
		if err := newClient(t, primary).Do(t.Context(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
			t.Fatal(err)
		}
	}()
	for _, addr := range srv.Endpoints() {
		if addr == primary {
			continue
		}
		c := newClient(t, addr)
		go func() { _ = c.Do(context.Background(), "DEBUG", "SLEEP", d.Seconds()).Err() }()
		// It sleeps once a PING of its own waits behind the DEBUG.
		probe := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer probe.Close()
		for deadline := time.Now().Add(d / 2); ; {
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			err := probe.Ping(ctx).Err()
			cancel()
			if err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replica %s does not sleep", addr)
			}
		}
	}
}

func TestReplicaAcksOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redislock.Option{
		redislock.WithReplicaAcks(0, time.Second),
		redislock.WithReplicaAcks(17, time.Second),
		redislock.WithReplicaAcks(1, 0),
		redislock.WithReplicaAcks(1, 2*redislock.MaxReplicaAckTimeout),
	} {
		if _, err := redislock.New(c, o); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("New: %v, want ErrInvalidArgument", err)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redislock.New(ring, redislock.WithReplicaAcks(1, time.Second)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("New(ring, WithReplicaAcks): %v, want ErrInvalidArgument", err)
	}
}

// Every operation of the contract works under WithReplicaAcks, on a primary
// with replicas behind Sentinels.
func TestReplicaAcksConformance(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(2), testenv.Sentinels(3))
	locktest.Run(t, func(t testing.TB) lock.Lock {
		return newLock(t, srv.FailoverClient(t), redislock.WithReplicaAcks(2, time.Second))
	})
}

// The hazard the option removes, shown on real servers: the replica does
// not have a grant yet (it is cut off) when the primary dies. Without
// acks the grant is made, the replica is promoted without it, and a second
// client is granted the same key while the first still holds it: two
// holders. With acks the first acquire fails with ErrUnavailable (and its
// grant is undone) instead.
func TestFailoverLosesAGrantWithoutAcks(t *testing.T) {
	for _, acks := range []bool{false, true} {
		t.Run(fmt.Sprintf("acks=%v", acks), func(t *testing.T) {
			t.Parallel()
			srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
			var opts []redislock.Option
			if acks {
				opts = append(opts, redislock.WithReplicaAcks(1, 300*time.Millisecond))
			}
			first := newLock(t, srv.FailoverClient(t), opts...)
			ctx := t.Context()
			cutReplicas(t, srv, 3*time.Second)
			h, err := first.TryAcquire(ctx, "k", time.Minute)
			switch {
			case acks && !errors.Is(err, lock.ErrUnavailable):
				t.Fatalf("acquire with no replica answering: %v, want ErrUnavailable", err)
			case !acks && err != nil:
				t.Fatal(err)
			}
			srv.Failover(t, testenv.Crash)
			second := newLock(t, srv.FailoverClient(t), opts...)
			var h2 lock.Handle
			for deadline := time.Now().Add(30 * time.Second); ; {
				if h2, err = second.TryAcquire(ctx, "k", time.Minute); err == nil || errors.Is(err, lock.ErrNotAcquired) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("the second client after the failover: %v", err)
			}
			if !acks {
				if time.Now().Before(h.ValidUntil()) {
					t.Logf("as expected without acks: two holders of k, tokens %d and %d", h.Token(), h2.Token())
				} else {
					t.Fatalf("the first grant's validity ended before the second grant: the test shows nothing")
				}
			}
		})
	}
}

// Grants acknowledged by a replica survive the death of the primary: after
// the failover each is still held (a second client cannot take it), its
// holder can extend and release it, and tokens drawn after are larger.
func TestAcknowledgedGrantsSurviveAFailover(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	opt := redislock.WithReplicaAcks(1, time.Second)
	first := newLock(t, srv.FailoverClient(t), opt)
	ctx := t.Context()
	var held []lock.Handle
	var top uint64
	for i := range 50 {
		h, err := first.TryAcquire(ctx, fmt.Sprintf("survivor-%d", i), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
		top = max(top, h.Token())
	}
	srv.Failover(t, testenv.Crash)
	second := newLock(t, srv.FailoverClient(t), opt)
	for _, h := range held {
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; {
			_, err = second.TryAcquire(ctx, h.Key(), time.Minute)
			if !errors.Is(err, lock.ErrUnavailable) || time.Now().After(deadline) {
				break
			}
		}
		if !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("%s after the failover: %v, want ErrNotAcquired (still held)", h.Key(), err)
		}
		if err := h.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("extend of %s after the failover: %v", h.Key(), err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("release of %s after the failover: %v", h.Key(), err)
		}
	}
	h, err := second.TryAcquire(ctx, "survivor-0", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if h.Token() <= top {
		t.Fatalf("token %d after the failover, want above %d", h.Token(), top)
	}
}

// A grant handed to a queued waiter is confirmed by an acknowledged
// extension of the waiter's own: with no replica answering, AcquireQueued
// fails with ErrUnavailable rather than return a handoff that a failover
// would lose.
func TestHandoffIsConfirmedUnderAcks(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3))
	opt := redislock.WithReplicaAcks(1, 300*time.Millisecond)
	holder, waiter := newLock(t, srv.FailoverClient(t), opt), newLock(t, srv.FailoverClient(t), opt)
	ctx := t.Context()
	h, err := holder.TryAcquire(ctx, "handed", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h, err := waiter.AcquireQueued(ctx, "handed", time.Minute)
		if err == nil {
			_ = h.Release(context.WithoutCancel(ctx))
		}
		got <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := holder.Waiting(ctx, "handed")
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter is not queued: %d, %v", n, err)
		}
	}
	cutReplicas(t, srv, 3*time.Second)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("AcquireQueued of a handoff no replica acknowledged: %v, want ErrUnavailable", err)
	}
}

// On a Cluster, an acknowledged write goes to the key's master through
// the cluster client's slot map. After a failover that map is stale: the
// old master answers MOVED, which the cluster client does not see (the
// write and its WAIT are pipelined on the node itself). The MOVED must
// have it reload the map at once; before that fix, acknowledged writes
// failed for up to 10 s after each failover (until the map aged out).
func TestReplicaAcksFollowAClusterFailover(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.Members(3), testenv.Replicas(1))
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Endpoints()})
	t.Cleanup(func() { _ = client.Close() })
	l := newLock(t, client, redislock.WithReplicaAcks(1, time.Second))
	ctx := t.Context()
	h, err := l.TryAcquire(ctx, "{moved}-before", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv.FailoverKey(t, testenv.Handover, "{moved}")
	start := time.Now()
	for i := 0; ; i++ {
		h2, err := l.TryAcquire(ctx, fmt.Sprintf("{moved}-after-%d", i), time.Minute)
		if err == nil {
			t.Logf("granted %v after the handover, attempt %d", time.Since(start).Round(time.Millisecond), i+1)
			_ = h2.Release(ctx)
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("no acknowledged grant within 3 s of the handover of the key's slot: %v", err)
		}
		// The reload runs in the background: give it a moment.
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := h.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("extend of the grant made before the handover: %v", err)
	}
}
