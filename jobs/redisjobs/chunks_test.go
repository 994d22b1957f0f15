package redisjobs_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

// calls records the scripts a client runs: for each script hash, the
// number of keys and the first argument of every call, and the most calls
// of one script in flight at once.
type calls struct {
	mu        sync.Mutex
	keys      map[string][]int
	firstArgs map[string][]string
	inFlight  map[string]int
	most      map[string]int
}

func (c *calls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *calls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sha := c.record(cmd)
		defer c.done(sha)
		return next(ctx, cmd)
	}
}

func (c *calls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			defer c.done(c.record(cmd))
		}
		return next(ctx, cmds)
	}
}

// record records cmd if it is a script's, and returns the script's hash.
func (c *calls) record(cmd redis.Cmder) string {
	a := cmd.Args()
	if len(a) < 3 || !strings.EqualFold(fmt.Sprint(a[0]), "evalsha") {
		return ""
	}
	sha := fmt.Sprint(a[1])
	n, _ := strconv.Atoi(fmt.Sprint(a[2]))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys[sha] = append(c.keys[sha], n)
	if len(a) > 3+n {
		c.firstArgs[sha] = append(c.firstArgs[sha], fmt.Sprint(a[3+n]))
	}
	c.inFlight[sha]++
	c.most[sha] = max(c.most[sha], c.inFlight[sha])
	return sha
}

func (c *calls) done(sha string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight[sha]--
}

func (c *calls) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys, c.firstArgs, c.inFlight, c.most = map[string][]int{}, map[string][]string{}, map[string]int{}, map[string]int{}
}

func counted(t *testing.T) (*redis.Client, *calls) {
	c := newClient(t, testenv.Redis(t).Addr())
	cs := &calls{}
	cs.reset()
	c.AddHook(cs)
	return c, cs
}

// A heartbeat of 7½ chunks extends every job of its epoch and reports the
// stale ones at the chunk boundaries, as one call did; it is 8 scripts of
// at most HeartbeatChunk jobs, at most HeartbeatWindow in flight at once.
func TestHeartbeatInChunks(t *testing.T) {
	c, cs := counted(t)
	chunk := redisjobs.HeartbeatChunk()
	// Warm: the script is loaded (no EVAL after a NOSCRIPT in the count).
	r, _ := newRegistry(t, c, "chunks")
	registrytest.ChunkedHeartbeat(t, r, chunk, 1)
	cs.reset()
	r2, _ := newRegistry(t, c, "chunks")
	registrytest.ChunkedHeartbeat(t, r2, chunk, 7)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	sha := redisjobs.HeartbeatScript()
	keys := cs.keys[sha]
	if len(keys) != 8 {
		t.Fatalf("%d heartbeat scripts for 7½ chunks, want 8", len(keys))
	}
	for _, n := range keys {
		if n > chunk+1 { // the index and a chunk of jobs
			t.Fatalf("a heartbeat script of %d keys: the chunk is %d jobs", n, chunk)
		}
	}
	if cs.most[sha] > redisjobs.HeartbeatWindow() {
		t.Fatalf("%d heartbeat scripts in flight at once, want at most %d", cs.most[sha], redisjobs.HeartbeatWindow())
	}
}

// A heartbeat whose second chunk fails on the server (a job key of the
// wrong type makes its script raise an error) reports that chunk's jobs as
// unknown, none as lost, and extends the others.
func TestHeartbeatChunkFails(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	r, ns := newRegistry(t, c, "poison")
	registrytest.FailedChunk(t, r, redisjobs.HeartbeatChunk(), 3, 1, func(id string) func() {
		// The job's hash becomes a list (its index entry stays): HGET fails.
		key := "{" + ns + "}:job:" + id
		fields, err := c.HGetAll(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.RPush(t.Context(), key, "not a hash").Err(); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := c.Del(t.Context(), key).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.HSet(t.Context(), key, fields).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// The listings read pages of ListChunk, each from the cursor the page
// before returned: with pages of 7 that end inside groups of jobs of one
// deadline, and at the real size, every expired job is found (and
// recovered by Scan) once; every listing script asks for at most a page.
func TestListingPages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		page, n int
	}{{"pages-of-7", 7, 450}, {"real-size", redisjobs.ListChunk(), 2*redisjobs.ListChunk() + 3}} {
		t.Run(tc.name, func(t *testing.T) {
			redisjobs.SetListChunk(t, tc.page)
			c, cs := counted(t)
			r, _ := newRegistry(t, c, "pages")
			registrytest.Pages(t, r, tc.n)
			cs.mu.Lock()
			defer cs.mu.Unlock()
			pages := cs.firstArgs[redisjobs.ListScript()]
			if len(pages) < 2*(tc.n/tc.page) {
				t.Fatalf("%d listing scripts for listings of %d jobs in pages of %d", len(pages), tc.n, tc.page)
			}
			for _, a := range pages {
				if n, _ := strconv.Atoi(a); n < 1 || n > tc.page {
					t.Fatalf("a listing script asked for %s jobs: the page is %d", a, tc.page)
				}
			}
		})
	}
}

// The conformance suite passes with pages of 3 for the listings: every
// check of theirs crosses pages.
func TestConformanceInSmallPages(t *testing.T) {
	redisjobs.SetListChunk(t, 3)
	c := newClient(t, testenv.Redis(t).Addr())
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, _ := newRegistry(t, c, "small")
		return r
	})
}
