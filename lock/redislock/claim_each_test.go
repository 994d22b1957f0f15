package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// ClaimEach over keys of many slots and more than a chunk: free keys are
// claimed with tokens above every earlier grant of the key, a held key and
// a key claimed earlier in the same call are refused with its remaining
// ttl, an invalid request is refused alone, the claims are grants of this
// owner as Inspect sees them, and a second ClaimEach of the same keys is
// refused whole.
func TestClaimEach(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		l, other := newLock(t, c), newLock(t, c)
		ctx := t.Context()
		keys := batchKeys(runID(t), 2500)
		// An earlier grant of key 0, released: its claim's token is above it.
		h, err := l.TryAcquire(ctx, keys[0], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		earlier := h.Token()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// A fence counter ahead of the clock (a clock stepped back):
		// the claim's token is the counter's next.
		const ahead = 9_000_000_000_000_000
		if err := c.Set(ctx, redislock.DefaultPrefix+"f"+encode(keys[1]), ahead, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		const held = 1234
		theirs, err := other.TryAcquire(ctx, keys[held], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reqs := make([]lock.ClaimRequest, 0, len(keys)+2)
		for _, k := range keys {
			reqs = append(reqs, lock.ClaimRequest{Key: k, TTL: time.Minute})
		}
		reqs = append(reqs,
			lock.ClaimRequest{Key: keys[5], TTL: time.Minute}, // claimed already, above
			lock.ClaimRequest{Key: keys[6], TTL: time.Microsecond})
		res := l.ClaimEach(ctx, reqs)
		if len(res) != len(reqs) {
			t.Fatalf("%d results for %d requests", len(res), len(reqs))
		}
		for i, r := range res[:len(keys)] {
			switch {
			case i == held:
				if !errors.Is(r.Err, lock.ErrNotAcquired) || lock.RemainingTTL(r.Err) < 50*time.Second {
					t.Errorf("claim of a held key: %v (remaining %v)", r.Err, lock.RemainingTTL(r.Err))
				}
			case r.Err != nil || r.Token == 0:
				t.Fatalf("claim of %q: %d, %v", keys[i], r.Token, r.Err)
			}
		}
		if res[0].Token <= earlier {
			t.Errorf("claim's token %d not above the earlier grant's %d", res[0].Token, earlier)
		}
		if res[1].Token != ahead+1 {
			t.Errorf("claim after a fence counter of %d: token %d", uint64(ahead), res[1].Token)
		}
		if !errors.Is(res[len(keys)].Err, lock.ErrNotAcquired) {
			t.Errorf("second claim of a key in one call: %v, want ErrNotAcquired", res[len(keys)].Err)
		}
		if !errors.Is(res[len(keys)+1].Err, lock.ErrInvalidTTL) {
			t.Errorf("claim with a ttl of 1µs: %v, want ErrInvalidTTL", res[len(keys)+1].Err)
		}
		for _, i := range []int{0, 99, 2499} {
			g, ok, err := l.Inspect(ctx, keys[i])
			if err != nil || !ok || g.Token != res[i].Token || g.Owner != l.Owner() || g.Remaining < 50*time.Second {
				t.Errorf("Inspect(%q) = %+v %v %v, want the claim (token %d)", keys[i], g, ok, err, res[i].Token)
			}
		}
		if g, _, _ := l.Inspect(ctx, keys[held]); g.Token != theirs.Token() {
			t.Errorf("the held key's grant changed: %+v", g)
		}
		for i, r := range l.ClaimEach(ctx, reqs[:len(keys)]) {
			if !errors.Is(r.Err, lock.ErrNotAcquired) {
				t.Fatalf("second ClaimEach of %q: %d, %v", keys[i], r.Token, r.Err)
			}
		}
		// Through lock.ClaimEach, and after them the next grant's
		// token is larger still.
		next := runID(t) + "/next"
		r := lock.ClaimEach(ctx, l, []lock.ClaimRequest{{Key: next, TTL: 10 * time.Millisecond}, {Key: "", TTL: time.Second}})
		if r[0].Err != nil || !errors.Is(r[1].Err, lock.ErrInvalidKey) {
			t.Fatalf("lock.ClaimEach: %+v", r)
		}
		if err := theirs.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h, err = l.TryAcquire(ctx, keys[held], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if h.Token() <= theirs.Token() {
			t.Errorf("token after the claims: %d, not above %d", h.Token(), theirs.Token())
		}
	})
}

// A claim creates no fence counter (10,000 timers ticking every second
// left 36 million counters of an hour, and even one that lived as long as
// its claim cost a write a claim); a counter that exists moves to the
// claim's token and keeps its lifetime; once the claims lapsed, the next
// claims' tokens are still larger (the server's clock).
func TestClaimEachCreatesNoCounters(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		l := newLock(t, c)
		ctx := t.Context()
		keys := batchKeys(runID(t), 200)
		// Key 0 was acquired before: its counter lives an hour.
		h, err := l.TryAcquire(ctx, keys[0], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		const ttl = 300 * time.Millisecond
		reqs := make([]lock.ClaimRequest, len(keys))
		for i, k := range keys {
			reqs[i] = lock.ClaimRequest{Key: k, TTL: ttl}
		}
		first := l.ClaimEach(ctx, reqs)
		for i, r := range first {
			if r.Err != nil {
				t.Fatalf("claim of %q: %v", keys[i], r.Err)
			}
		}
		fence := func(i int) string { return redislock.DefaultPrefix + "f" + encode(keys[i]) }
		if left := c.PTTL(ctx, fence(0)).Val(); left < 50*time.Minute {
			t.Errorf("the counter of an acquired key has %v left after a claim, want its hour", left)
		}
		if v := c.Get(ctx, fence(0)).Val(); v != strconv.FormatUint(first[0].Token, 10) {
			t.Errorf("the counter of an acquired key holds %q after a claim, want the claim's token %d", v, first[0].Token)
		}
		for i := 1; i < len(keys); i++ {
			if n := c.Exists(ctx, fence(i)).Val(); n != 0 {
				t.Fatalf("a claim of %q created a fence counter (%v left)", keys[i], c.PTTL(ctx, fence(i)).Val())
			}
		}
		// Every claim lapses by its server's clock. Not in the order of
		// the keys: on a Cluster each node's chunks run in their own
		// pipeline, so the last key's claim may have been made before the
		// first's. Wait for each.
		for _, k := range keys {
			for c.Exists(ctx, redislock.DefaultPrefix+"l"+encode(k)).Val() != 0 {
				select {
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		for i, r := range l.ClaimEach(ctx, reqs) {
			if r.Err != nil {
				t.Fatalf("second claim of %q: %v", keys[i], r.Err)
			}
			if r.Token <= first[i].Token {
				t.Errorf("second claim of %q: token %d, not above the first claim's %d", keys[i], r.Token, first[i].Token)
			}
		}
	})
}

// ForceRelease of a claim, which has no fence counter, leaves one past
// the claim's token, so that the key's next token is larger whatever the
// server's clock does; of a grant whose counter is ahead, it moves that
// counter on.
func TestForceReleaseOfAClaimLeavesACounter(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		l := newLock(t, c)
		ctx := t.Context()
		keys := batchKeys(runID(t), 2)
		fence := func(i int) string { return redislock.DefaultPrefix + "f" + encode(keys[i]) }
		// Key 1's counter is far ahead of the clock: its claim's token
		// comes from it.
		ahead := uint64(4_000_000_000_000_000) // µs, in 2096; below 2^53, exact in Lua
		if err := c.Set(ctx, fence(1), ahead, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		res := l.ClaimEach(ctx, []lock.ClaimRequest{{Key: keys[0], TTL: time.Minute}, {Key: keys[1], TTL: time.Minute}})
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("claim of %q: %v", keys[i], r.Err)
			}
		}
		if res[1].Token != ahead+1 {
			t.Fatalf("claim with a counter at %d: token %d, want %d", ahead, res[1].Token, ahead+1)
		}
		for i := range keys {
			if ok, err := l.ForceRelease(ctx, keys[i]); !ok || err != nil {
				t.Fatalf("ForceRelease of %q's claim: %v, %v", keys[i], ok, err)
			}
			want := strconv.FormatUint(res[i].Token+1, 10)
			if v := c.Get(ctx, fence(i)).Val(); v != want {
				t.Errorf("counter of %q after ForceRelease of its claim: %q, want %s", keys[i], v, want)
			}
			if left := c.PTTL(ctx, fence(i)).Val(); left < 50*time.Minute {
				t.Errorf("counter of %q after ForceRelease of its claim lives %v, want about an hour", keys[i], left)
			}
			h, err := l.TryAcquire(ctx, keys[i], time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if h.Token() <= res[i].Token {
				t.Errorf("grant of %q after ForceRelease: token %d, not above the claim's %d", keys[i], h.Token(), res[i].Token)
			}
		}
	})
}

// ClaimEach sends one script per chunk of 64 claims (per slot on a
// Cluster) in one pipeline.
func TestClaimEachRoundTrips(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		rec := &pipelines{}
		c.AddHook(rec)
		l := newLock(t, c)
		ctx := t.Context()
		prefix := runID(t)
		claim := func(tag string, n int) []lock.ClaimResult {
			reqs := make([]lock.ClaimRequest, n)
			for i := range reqs {
				reqs[i] = lock.ClaimRequest{Key: fmt.Sprintf("%s/{%s}/%d", prefix, tag, i), TTL: time.Minute}
			}
			return l.ClaimEach(ctx, reqs)
		}
		claim("warm", 1) // loads the script where it is not
		rec.take()
		for _, r := range claim("a", 501) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		chunk, _ := redislock.Chunks()
		if got, n := rec.take(), (501+chunk-1)/chunk; len(got) != 1 || got[0] != strings.TrimSpace(strings.Repeat("EVALSHA ", n)) {
			t.Errorf("501 claims sent %q, want one pipeline of %d scripts", got, n)
		}
	})
}

func TestClaimEachEmpty(t *testing.T) {
	l := newLock(t, newClient(t, "127.0.0.1:1"))
	if res := l.ClaimEach(t.Context(), nil); len(res) != 0 {
		t.Fatalf("ClaimEach(nil) = %v", res)
	}
	res := l.ClaimEach(t.Context(), []lock.ClaimRequest{{Key: strings.Repeat("k", lock.MaxKeyLen+1), TTL: time.Second}})
	if !errors.Is(res[0].Err, lock.ErrInvalidKey) {
		t.Fatalf("oversized key: %v", res[0].Err)
	}
}

// replayPipeline runs the next pipeline twice, as go-redis does when the
// replies of the first attempt are lost and it retries the pipeline.
type replayPipeline struct{ replayHook }

func (r *replayPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if r.armed.CompareAndSwap(true, false) {
			_ = next(ctx, cmds) // the attempt whose replies were lost
		}
		return next(ctx, cmds)
	}
}

func (r *replayPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// A ClaimEach whose pipeline is sent twice (its replies lost, the
// pipeline retried by the client) reports the claims the first attempt
// made, with their tokens, not as held by someone else.
func TestClaimEachRetriedByTheClient(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	hook := &replayPipeline{}
	c.AddHook(hook)
	l := newLock(t, c)
	ctx := t.Context()
	keys := batchKeys(runID(t), 600)
	reqs := make([]lock.ClaimRequest, len(keys))
	for i, k := range keys {
		reqs[i] = lock.ClaimRequest{Key: k, TTL: time.Minute}
	}
	l.ClaimEach(ctx, reqs[:1]) // loads the script: the replay is of EVALSHA
	hook.armed.Store(true)
	for i, r := range l.ClaimEach(ctx, reqs[1:]) {
		if r.Err != nil {
			t.Fatalf("retried claim of %q: %v", keys[i+1], r.Err)
		}
		if i%100 == 0 {
			if g, ok, err := l.Inspect(ctx, keys[i+1]); err != nil || !ok || g.Token != r.Token {
				t.Fatalf("Inspect(%q) = %+v %v %v, want token %d", keys[i+1], g, ok, err, r.Token)
			}
		}
	}
}
