package redislock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// serverOf is the address of the server (the master, on a Cluster) that
// key's scripts go to; "" on a single server.
func serverOf(t testing.TB, c redis.UniversalClient, key string) string {
	t.Helper()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := cc.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return m.Options().Addr
}

// checkWaves checks the pipelines a batch operation sent (got, as
// pipelines records them: each the names of its scripts) when it had
// scripts[addr] scripts for each server: to each server, pipelines of w
// scripts, the last one of what was left, so many for each server and no
// more scripts than that.
func checkWaves(t testing.TB, what string, got []string, scripts map[string]int, w int) {
	t.Helper()
	wantPipelines, wantScripts, gotScripts := 0, 0, 0
	for _, n := range scripts {
		wantPipelines += (n + w - 1) / w
		wantScripts += n
	}
	for _, p := range got {
		n := len(strings.Fields(p))
		if n > w {
			t.Errorf("%s: a pipeline of %d scripts (%.60q…), want %d at most", what, n, p, w)
		}
		gotScripts += n
	}
	if len(got) != wantPipelines || gotScripts != wantScripts {
		t.Errorf("%s: %d pipelines of %d scripts in all, want %d of %d (%d at most each)", what, len(got), gotScripts, wantPipelines, wantScripts, w)
	}
}

// A TryAcquireAnyEach whose pipeline cannot reach the server sends no more
// pipelines to it: every request fails as unavailable after one attempt,
// not one per pipeline.
func TestAcquireEachStopsAtAnUnreachableServer(t *testing.T) {
	p := faultproxy.Start(t, testenv.Redis(t).Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	rec := &pipelines{}
	c.AddHook(rec)
	l := newLock(t, c)
	ctx := t.Context()
	prefix := runID(t)
	_, perScript, _, _ := redislock.Chunks()
	reqs := anyRequests(prefix, 1+3*redislock.AnyEachWindow()*perScript, 1, func(int) string { return "sem" })
	l.TryAcquireAnyEach(ctx, reqs[:1]) // the script loaded
	rec.take()
	p.Refuse(true)
	p.ResetAll()
	for i, r := range l.TryAcquireAnyEach(ctx, reqs[1:]) {
		if !errors.Is(r.Err, lock.ErrUnavailable) {
			t.Fatalf("request %d through a proxy that refuses: %v, want ErrUnavailable", i+1, r.Err)
		}
	}
	if got := rec.take(); len(got) != 1 {
		t.Errorf("sent %d pipelines to a server that refuses connections, want 1", len(got))
	}
}
