package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// leader returns the index of the cluster's leader among srv.Endpoints().
func leader(t *testing.T, c *clientv3.Client, srv *testenv.Server) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, ep := range srv.Endpoints() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := c.Status(ctx, ep)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
	}
	t.Fatal("no leader within 10 s")
	return -1
}

// contender tries the key over and over from another Lock and records
// every grant it gets (and releases it at once).
type contender struct {
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	grants []grantAt
	errs   map[string]int
}

type grantAt struct {
	at    time.Time
	token uint64
}

func contend(l *etcdlock.Lock, key string) *contender {
	c := &contender{stop: make(chan struct{}), done: make(chan struct{}), errs: map[string]int{}}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			h, err := l.TryAcquire(ctx, key, time.Second)
			now := time.Now()
			cancel()
			c.mu.Lock()
			switch {
			case err == nil:
				c.grants = append(c.grants, grantAt{now, h.Token()})
			case errors.Is(err, lock.ErrNotAcquired):
				c.errs["not acquired"]++
			default:
				c.errs["unavailable"]++
			}
			c.mu.Unlock()
			if err == nil {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = h.Release(rctx)
				cancel()
			}
			if err != nil && !errors.Is(err, lock.ErrNotAcquired) {
				select { // do not spin on a fast failure
				case <-c.stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
	return c
}

func (c *contender) finish(t *testing.T) []grantAt {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("contender: %d grants, attempts %v", len(c.grants), c.errs)
	return c.grants
}

// holdOnCluster starts a 3-member cluster and a holder that keeps a key
// with Keep, and a contender for the key on another Lock.
func holdOnCluster(t *testing.T, ttl time.Duration) (srv *testenv.Server, c *clientv3.Client, h lock.Handle, lease *lock.Lease, other *etcdlock.Lock) {
	srv = testenv.NewEtcd(t, testenv.Members(3))
	c = newClient(t, srv.Endpoints())
	holder := newLock(t, srv.Endpoints())
	other = newLock(t, srv.Endpoints())
	h, err := holder.TryAcquire(ctxFor(t, 10*time.Second), "cluster/"+t.Name(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	lease, err = lock.Keep(context.Background(), h, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	return srv, c, h, lease, other
}

// checkNoOverlap fails if the contender was granted the key while the
// holder's grant could still be valid.
func checkNoOverlap(t *testing.T, grants []grantAt, lease *lock.Lease) {
	t.Helper()
	alive := lease.Context().Err() == nil
	for _, g := range grants {
		if alive || g.at.Before(lease.ValidUntil()) {
			t.Errorf("two grants: the contender got token %d at %v, the holder (alive %v) is valid until %v",
				g.token, g.at.Format(time.StampMicro), alive, lease.ValidUntil().Format(time.StampMicro))
		}
	}
}

// A follower stops while the key is held: the holder keeps renewing and no
// one else is granted the key.
func TestClusterFollowerStopped(t *testing.T) {
	ttl := 2 * time.Second
	srv, c, h, lease, other := holdOnCluster(t, ttl)
	ct := contend(other, h.Key())
	follower := (leader(t, c, srv) + 1) % 3
	srv.StopMember(t, follower)
	stopped := time.Now()
	select {
	case <-lease.Context().Done():
		t.Fatalf("lease lost after a follower stopped: %v", context.Cause(lease.Context()))
	case <-time.After(2 * ttl): // several renewals
	}
	if vu := lease.ValidUntil(); vu.Before(stopped.Add(ttl / 2)) {
		t.Fatalf("no renewal since the follower stopped: valid until %v after", vu.Sub(stopped))
	}
	checkNoOverlap(t, ct.finish(t), lease)
	g, ok, err := other.Inspect(ctxFor(t, 10*time.Second), h.Key())
	if err != nil || !ok || g.Token != h.Token() {
		t.Fatalf("Inspect = %+v, %v, %v; want the holder's token %d", g, ok, err, h.Token())
	}
	srv.StartMember(t, follower)
	handOver(t, lease, other, ttl, false)
}

// The leader is killed while the key is held: never two grants; the holder
// either keeps its grant or is told by its ValidUntil that it lost it.
func TestClusterLeaderKilled(t *testing.T) {
	ttl := 2 * time.Second
	srv, c, h, lease, other := holdOnCluster(t, ttl)
	ct := contend(other, h.Key())
	srv.StopMember(t, leader(t, c, srv)) // SIGKILL; returns once a new leader answers
	killed := time.Now()
	select {
	case <-lease.Context().Done():
		if !errors.Is(lease.Err(), lock.ErrLost) {
			t.Fatalf("lease ended with %v, want ErrLost", context.Cause(lease.Context()))
		}
		t.Logf("the holder lost its grant: %v", lease.Err())
	case <-time.After(2 * ttl):
		if vu := lease.ValidUntil(); vu.Before(killed.Add(ttl / 2)) {
			t.Fatalf("no renewal since the leader died: valid until %v after", vu.Sub(killed))
		}
		t.Logf("the holder kept its grant through the leader change")
	}
	checkNoOverlap(t, ct.finish(t), lease)
	handOver(t, lease, other, ttl, lease.Err() != nil)
}

// Two of three members stop for longer than the ttl: the holder's Keep
// context is cancelled by its local deadline, and no one else is granted
// the key until a quorum is back.
func TestClusterQuorumLoss(t *testing.T) {
	ttl := 2 * time.Second
	srv, c, h, lease, other := holdOnCluster(t, ttl)
	ld := leader(t, c, srv)
	a, b := (ld+1)%3, (ld+2)%3
	ct := contend(other, h.Key())
	srv.StopMember(t, a)
	srv.StopMember(t, b)
	stopped := time.Now()
	select {
	case <-lease.Context().Done():
	case <-time.After(ttl + time.Second):
		t.Fatalf("Keep's context not cancelled within ttl + 1 s of the quorum loss")
	}
	if now := time.Now(); now.Before(h.ValidUntil()) {
		t.Fatalf("Keep gave up %v before ValidUntil", h.ValidUntil().Sub(now))
	}
	if !errors.Is(lease.Err(), lock.ErrLost) {
		t.Fatalf("lease ended with %v, want ErrLost", context.Cause(lease.Context()))
	}
	t.Logf("holder told of the loss %v after the quorum loss: %v", time.Since(stopped).Round(time.Millisecond), lease.Err())
	// Past twice the ttl without a quorum: still no grant.
	<-time.After(time.Until(stopped.Add(2 * ttl)))
	srv.StartMember(t, a)
	back := time.Now()
	srv.StartMember(t, b)
	for _, g := range ct.finish(t) {
		if g.at.Before(back) {
			t.Errorf("the key was granted (token %d) %v before the quorum returned", g.token, back.Sub(g.at))
		}
	}
	// The new leader renewed every lease: the key stays held until the
	// holder's Release (or a full ttl).
	handOver(t, lease, other, ttl, true)
}

// handOver releases the holder's lease (ErrLost accepted when lostOK) and
// checks that other is then granted the key with a larger token.
func handOver(t *testing.T, lease *lock.Lease, other *etcdlock.Lock, ttl time.Duration, lostOK bool) {
	t.Helper()
	if err := lease.Release(ctxFor(t, 10*time.Second)); err != nil && !(lostOK && errors.Is(err, lock.ErrLost)) {
		t.Fatalf("the holder's Release: %v (a loss is expected: %v)", err, lostOK)
	}
	h := lease.Handle()
	h2, err := lock.Acquire(ctxFor(t, 3*ttl), other, h.Key(), ttl)
	if err != nil || h2.Token() <= h.Token() {
		t.Fatalf("after the holder's Release: %v, %v (token must be > %d)", h2, err, h.Token())
	}
	_ = h2.Release(ctxFor(t, 10*time.Second))
}

// A member cut off from its peers has no leader; a call through it is
// refused at once (ErrNoLeader, so lock.ErrUnavailable) rather than held
// until the member's request timeout: the caller's next attempt can go to
// another member while its grants are still valid. Without the
// require-leader mark, the TryAcquire below ran into its 3 s deadline.
func TestAMemberWithoutALeaderRefusesAtOnce(t *testing.T) {
	srv := testenv.NewEtcd(t, testenv.Members(3), testenv.PeerProxies())
	all, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	lead := leader(t, all, srv)
	cut := (lead + 1) % 3 // a follower: it loses its leader
	only, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints()[cut : cut+1], DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	l, err := etcdlock.New(only)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv.IsolateMember(t, cut)
	defer srv.HealMember(t, cut)
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := all.Status(ctx, srv.Endpoints()[cut])
		cancel()
		if err == nil && st.Leader == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the isolated member still has a leader after 10 s (%v)", err)
		}
		<-time.After(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = l.TryAcquire(ctx, "isolated", time.Second)
	if !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Fatalf("TryAcquire through a member without a leader: %v, want ErrUnavailable from ErrNoLeader", err)
	}
}
