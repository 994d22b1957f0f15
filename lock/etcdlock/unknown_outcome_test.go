package etcdlock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// The tests of this file lose the reply of a request (a gRPC interceptor
// answers codes.Unavailable, "transport is closing", which clientv3 does
// not retry), and some hold the request itself back until a later one
// was sent: a request in flight when the connection broke, applied late.

// interceptedLock is a Lock on a client of its own whose unary calls go
// through f.
func interceptedLock(t *testing.T, endpoints []string, f grpc.UnaryClientInterceptor) *etcdlock.Lock {
	t.Helper()
	return dialedLock(t, endpoints, grpc.WithChainUnaryInterceptor(f))
}

// heldTxn holds the first Txn sent once armed: its caller gets an unknown
// outcome at once, and the Txn goes to the server when release is called,
// which done then says it has answered.
type heldTxn struct {
	armed   atomic.Bool
	once    sync.Once
	proceed chan struct{}
	done    chan struct{}
}

func newHeldTxn(t *testing.T) *heldTxn {
	h := &heldTxn{proceed: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(h.release)
	return h
}

func (h *heldTxn) release() { h.once.Do(func() { close(h.proceed) }) }

// hold reports whether it held this call (method, req) back.
func (h *heldTxn) hold(method string, req any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) bool {
	if method != "/etcdserverpb.KV/Txn" || !h.armed.CompareAndSwap(true, false) {
		return false
	}
	go func() {
		<-h.proceed
		_ = invoker(context.Background(), method, req, new(pb.TxnResponse), cc, opts...)
		close(h.done)
	}()
	return true
}

var errHeld = status.Error(codes.Unavailable, "test: transport is closing (the request is on its way)")

// An Extend to another ttl moves the key to a new lease in one Txn; when
// its outcome is unknown, the next Extend settles which lease the key is
// on. A read that finds it on the old lease does not prove the move will
// not land after it: the new lease is revoked first, and the key read
// again. The move applied between the read and the background revoke of
// the new lease, that revoke deleted the key, another client took it, and
// the first handle's Extends (keep-alives of its old lease) went on
// succeeding: two holders.
func TestExtendAfterAMoveOfUnknownOutcomeLandsLate(t *testing.T) {
	srv := testenv.Etcd(t)
	held := newHeldTxn(t)
	var holdRevokes atomic.Bool
	l := interceptedLock(t, srv.Endpoints(), func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if held.hold(method, req, cc, invoker, opts) {
			return errHeld
		}
		if method == "/etcdserverpb.Lease/LeaseRevoke" && holdRevokes.Load() {
			held.release()
			<-held.done // proposed after the Txn: applied after it
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	other := newLock(t, srv.Endpoints())
	raw := newClient(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	key := runID(t) + "k"
	h, err := l.TryAcquire(ctx, key, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wch := raw.Watch(ctx, etcdlock.DefaultPrefix+key+"\x00\x01", clientv3.WithPrefix(), clientv3.WithFilterPut())
	held.armed.Store(true)
	if err := h.Extend(ctx, 3*time.Second); err == nil || errors.Is(err, lock.ErrLost) {
		t.Fatalf("Extend with its move's reply lost: %v, want an unknown outcome", err)
	}
	holdRevokes.Store(true)
	settled := h.Extend(ctx, time.Second)
	held.release()
	<-held.done
	for deleted := false; !deleted; {
		resp, ok := <-wch
		if !ok {
			t.Fatal("the watch ended")
		}
		for _, ev := range resp.Events {
			deleted = deleted || ev.Type == mvccpb.DELETE
		}
	}
	h2, err := other.TryAcquire(ctx, key, time.Second)
	if err != nil {
		t.Fatalf("another Lock's TryAcquire after the key's deletion: %v", err)
	}
	defer h2.Release(ctx)
	switch {
	case settled == nil:
		if err := h.Extend(ctx, time.Second); err == nil && time.Now().Before(h.ValidUntil()) {
			t.Fatalf("two holders of %q: another Lock holds it (token %d) while the first handle's Extend succeeds (token %d)", key, h2.Token(), h.Token())
		}
	case !errors.Is(settled, lock.ErrLost):
		t.Fatalf("the Extend that settled the move: %v, want nil or ErrLost", settled)
	}
}

// A ClaimEach whose reply is lost (its Txn applied) leaves its leases to
// lapse with their ttl: the claims may rest on them. They went back to
// the spare pool, the next grant of that ttl took one, and its renewals
// kept the claim alive past its ttl.
func TestClaimEachOfUnknownOutcomeLapsesAtItsTTL(t *testing.T) {
	srv := testenv.Etcd(t)
	var loseReply atomic.Bool
	l := interceptedLock(t, srv.Endpoints(), func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && method == "/etcdserverpb.KV/Txn" && loseReply.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "test: transport is closing (the Txn was applied, its reply lost)")
		}
		return err
	})
	other := newLock(t, srv.Endpoints())
	raw := newClient(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	const ttl = 2 * time.Second
	p := runID(t)
	key := p + "claimed"
	loseReply.Store(true)
	res := l.ClaimEach(ctx, []lock.ClaimRequest{{Key: key, TTL: ttl}})
	claimedAt := time.Now()
	if !errors.Is(res[0].Err, lock.ErrUnavailable) {
		t.Fatalf("ClaimEach with its reply lost: %v, want ErrUnavailable", res[0].Err)
	}
	gr, err := raw.Get(ctx, etcdlock.DefaultPrefix+key+"\x00\x01", clientv3.WithPrefix())
	if err != nil || len(gr.Kvs) != 1 {
		t.Fatalf("the claim's key: %v, %v", gr, err)
	}
	claimLease := gr.Kvs[0].Lease
	var onIt lock.Handle
	for i := range 6 {
		k := p + "other/" + strconv.Itoa(i)
		h, err := l.TryAcquire(ctx, k, ttl)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Release(context.Background()) })
		r, err := raw.Get(ctx, etcdlock.DefaultPrefix+k+"\x00\x01", clientv3.WithPrefix())
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("the grant key of %q: %v, %v", k, r, err)
		}
		if r.Kvs[0].Lease == claimLease {
			onIt = h
		}
	}
	// Renewals of that grant, if one took the claim's lease, past the
	// claim's ttl (a ticker paces them; nothing waits on another goroutine).
	tick := time.NewTicker(400 * time.Millisecond)
	defer tick.Stop()
	for time.Since(claimedAt) < ttl+2*time.Second {
		<-tick.C
		if onIt != nil {
			if err := onIt.Extend(ctx, ttl); err != nil {
				t.Fatal(err)
			}
		}
	}
	h, err := other.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatalf("%v after a claim of %v whose reply was lost: %v (the claim lives on, on lease %x, renewed with an unrelated grant)",
			time.Since(claimedAt).Round(time.Millisecond), ttl, err, claimLease)
	}
	_ = h.Release(ctx)
}

// A batch acquire of unknown outcome whose Txn lands after the background
// delete of its key leaves a grant no handle knows of on the batch's
// shared lease: the batch's next Renew, which reads the lease's keys,
// deletes it. The batch's renewals kept it alive until its Close.
func TestBatchAcquireOfUnknownOutcomeLandingLateIsDeleted(t *testing.T) {
	srv := testenv.Etcd(t)
	held := newHeldTxn(t)
	l := interceptedLock(t, srv.Endpoints(), func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if held.hold(method, req, cc, invoker, opts) {
			return errHeld
		}
		if method == "/etcdserverpb.KV/DeleteRange" {
			err := invoker(ctx, method, req, reply, cc, opts...)
			held.release() // the Txn, sent first, applies after the background delete
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	other := newLock(t, srv.Endpoints())
	ctx := ctxFor(t, time.Minute)
	const ttl = 2 * time.Second
	p := runID(t)
	b := newBatch(t, l, ttl)
	held.armed.Store(true)
	if _, err := b.TryAcquire(ctx, p+"lost"); !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("a batch TryAcquire with its reply lost: %v, want ErrUnavailable", err)
	}
	<-held.done
	began := time.Now()
	h, err := b.TryAcquire(ctx, p+"kept")
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(400 * time.Millisecond) // paces the renewals past the ttl
	defer tick.Stop()
	for time.Since(began) < ttl+2*time.Second {
		<-tick.C
		if errs := b.Renew(ctx, []lock.Handle{h}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	h2, err := other.TryAcquire(ctx, p+"lost", ttl)
	if err != nil {
		t.Fatalf("%v after a batch acquire that failed as unavailable: %v (a grant no handle knows of, on the batch's renewed lease)",
			time.Since(began).Round(time.Millisecond), err)
	}
	_ = h2.Release(ctx)
}

// A ForceRelease whose revoke of the holder's lease fails deletes the key
// but leaves the lease renewed by its holder, whose Extends (keep-alives
// that never read the key) go on succeeding while another client takes
// the key. It reported success, and the revoke was never tried again: two
// holders until the holder's Release. Now it says the revoke failed, and
// tries it again in the background: the holder's next Extend after that
// is lost.
func TestForceReleaseWhoseRevokeFails(t *testing.T) {
	srv := testenv.Etcd(t)
	holder := dialedLock(t, srv.Endpoints())
	var failRevokes atomic.Int32
	failRevokes.Store(1)
	operator := interceptedLock(t, srv.Endpoints(), func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method == "/etcdserverpb.Lease/LeaseRevoke" && failRevokes.Add(-1) >= 0 {
			return status.Error(codes.Internal, "test: the revoke fails")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	ctx := t.Context()
	const key = "force-release/revoke-fails"
	h, err := holder.TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Release(context.Background()) }()
	found, err := operator.ForceRelease(ctx, key)
	if !found || !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("ForceRelease whose revoke failed: %v, %v; want true and an error matching lock.ErrUnavailable", found, err)
	}
	other, err := dialedLock(t, srv.Endpoints()).TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("the key is still held after ForceRelease: %v", err)
	}
	defer func() { _ = other.Release(context.Background()) }()
	// Close waits for the background revoke.
	if err := operator.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Extend(ctx, 10*time.Second); !errors.Is(err, lock.ErrLost) {
		t.Fatalf("the evicted holder's Extend, once the revoke was tried again: %v, want lock.ErrLost (another client holds the key)", err)
	}
}
