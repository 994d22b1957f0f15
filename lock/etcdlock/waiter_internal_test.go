package etcdlock

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// A grant whose key is deleted while the release watch is broken is
// reported lost once the watch is made again: the new watch starts at its
// creation, so the Lock looks up the keys of the grants registered for
// loss detection. The test breaks the watch itself and holds the watch's
// state while it revokes the grant, so that the new watch cannot be made
// before the deletion.
func TestLossDuringAWatchBreak(t *testing.T) {
	srv := testenv.Etcd(t)
	c := newClient(t, srv.Endpoints())
	l, err := New(c, WithMinTTL(time.Second), WithPrefix("/watchbreak/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lh, err := l.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h := lh.(*handle)
	if err := l.ensureWatch(ctx); err != nil {
		t.Fatal(err)
	}
	// As after a first call to Lost whose lookup found the key.
	h.mu.Lock()
	h.lost = make(chan struct{})
	h.mu.Unlock()
	l.w.mu.Lock()
	l.w.losses = map[string]map[*handle]struct{}{h.ekey: {h: {}}}
	stop, done := l.w.cancel, l.w.done
	l.w.mu.Unlock()

	stop() // the watch breaks
	<-done // its loop has returned and scheduled the new watch
	l.w.mu.Lock()
	_, err = c.Revoke(ctx, h.lease.id)
	l.w.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.lost:
	case <-time.After(5 * time.Second): // the new watch, then one lookup
		t.Fatal("Lost not closed: the key was deleted while the release watch was broken")
	}
	if r, err := c.Get(ctx, h.ekey, clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Fatalf("the grant's key after the revoke: %v, %v", r, err)
	}
}
