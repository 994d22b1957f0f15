package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/stacks"
	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
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
