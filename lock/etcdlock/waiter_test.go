package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/stacks"
	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// watchStreams returns the ids of the goroutines that run an etcd client
// watch stream.
func watchStreams() map[string]bool {
	ids := map[string]bool{}
	for id, stack := range stacks.All() {
		if strings.Contains(stack, "(*watchGRPCStream).run(") {
			ids[id] = true
		}
	}
	return ids
}

// A Subscribe that gives up while the release watch's creation is on its
// way leaves no watch stream behind once the creation notice has come: the
// etcd client keeps a stream open for good when its only watcher is
// cancelled before that notice (a cancelled Acquire under load left one,
// and locktest's CancelStorm reported its four goroutines as a leak).
func TestCancelledSubscribeLeavesNoWatchStream(t *testing.T) {
	srv := testenv.Etcd(t)
	p := faultproxy.Start(t, srv.Endpoints()[0])
	l := newLock(t, []string{p.Addr()})
	ctx := ctxFor(t, 30*time.Second)
	h, err := l.TryAcquire(ctx, "subscribe/"+runID(t), time.Minute) // the connection made
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := watchStreams()
	const delay = 400 * time.Millisecond
	p.SetReplyDelay(delay)
	sctx, cancel := context.WithTimeout(ctx, delay/4)
	sub, err := l.Subscribe(sctx, "subscribe/"+runID(t))
	cancel()
	if err == nil {
		_ = sub.Close()
		t.Fatal("Subscribe returned before the watch's creation notice could arrive")
	}
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Subscribe whose ctx ended: %v, want ErrUnavailable", err)
	}
	p.SetReplyDelay(0)
	// The notice comes after the delay; the stream then closes at once.
	deadline := time.Now().Add(delay + 2*time.Second)
	for {
		var left []string
		for id := range watchStreams() {
			if !before[id] {
				left = append(left, id)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watch streams still open %v after the creation notice was due (goroutines %v)", len(left), delay+2*time.Second, left)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// revokeGrant revokes the lease of key's grant through c, as a crashed
// holder's lease ends or an operator revokes it.
func revokeGrant(t *testing.T, ctx context.Context, c *clientv3.Client, key string) {
	t.Helper()
	r, err := c.Get(ctx, etcdlock.DefaultPrefix+key, clientv3.WithPrefix())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the grant's key: %v, %v", r, err)
	}
	if _, err := c.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}

// A grant whose key is deleted before the release watch can see it is
// still reported by Lost: the watch starts at its creation (no start
// revision), so once it runs the Lock looks up the keys of the grants
// that asked for Lost. Two ways to miss it before: the key deleted while
// the watch that Lost started was being made (the CI failure of
// TestShareLeaseRevoked, under load), and the key deleted, with the watch
// running, before the first call to Lost.
func TestLostSeesALossTheWatchCannot(t *testing.T) {
	srv := testenv.Etcd(t)
	c := newClient(t, srv.Endpoints())
	t.Run("while the watch is made", func(t *testing.T) {
		p := faultproxy.Start(t, srv.Endpoints()[0])
		l := newLock(t, []string{p.Addr()})
		ctx := ctxFor(t, 30*time.Second)
		key := "lost/" + runID(t)
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const delay = 300 * time.Millisecond
		p.SetDelay(delay) // the watch's creation reaches the server late
		lost := h.(lock.LossNotifier).Lost()
		revokeGrant(t, ctx, c, key) // on a client of its own: before the watch exists
		select {
		case <-lost:
		case <-time.After(4*delay + 5*time.Second): // the watch made, then one lookup
			t.Fatal("Lost not closed: the key was deleted while the release watch was being made")
		}
	})
	t.Run("before the first call to Lost", func(t *testing.T) {
		l := newLock(t, srv.Endpoints())
		ctx := ctxFor(t, 30*time.Second)
		key := "lost/" + runID(t)
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := l.Subscribe(ctx, key) // the release watch runs
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		revokeGrant(t, ctx, c, key)
		if err := sub.Wait(ctx, 0); err != nil { // the watch has seen the delete
			t.Fatal(err)
		}
		select {
		case <-h.(lock.LossNotifier).Lost():
		case <-time.After(5 * time.Second): // one lookup
			t.Fatal("Lost not closed: the key was deleted before the first call to Lost")
		}
	})
}
