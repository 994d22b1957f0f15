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

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// The conformance suite on grants made through a Batch, and the batch
// suite (many renewed, one lost alone, releases, foreign handles, a
// Keeper), on a single server and on a three-master Cluster.
func TestBatchConformance(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		var newL locktest.Factory
		if cc, ok := c.(*redis.ClusterClient); ok {
			addrs := cc.Options().Addrs
			newL = func(t testing.TB) lock.Lock { return newLock(t, newClusterClient(t, addrs)) }
		} else {
			addr := c.(*redis.Client).Options().Addr
			newL = func(t testing.TB) lock.Lock { return newLock(t, newClient(t, addr)) }
		}
		t.Run("Conformance", func(t *testing.T) { locktest.Run(t, locktest.Batched(newL)) })
		t.Run("Batch", func(t *testing.T) { locktest.RunBatch(t, newL) })
	})
}

// runID is new per test run (-count 2 reuses the shared server).
func runID(t testing.TB) string {
	return t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// batchKeys are n keys spread over a few hash tags (each its own slot on a
// Cluster) and over many slots (a few keys without a tag).
func batchKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		switch {
		case i%100 == 99:
			keys[i] = fmt.Sprintf("%s/spread/%d", prefix, i)
		default:
			keys[i] = fmt.Sprintf("%s/{tag%d}/%d", prefix, i%3, i)
		}
	}
	return keys
}

func newBatch(t testing.TB, l *redislock.Lock, ttl time.Duration) lock.Batch {
	t.Helper()
	b, err := l.NewBatch(t.Context(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// acquireAll takes every key through b.
func acquireAll(t testing.TB, b lock.Batch, keys []string) []lock.Handle {
	t.Helper()
	hs := make([]lock.Handle, len(keys))
	for i, k := range keys {
		h, err := b.TryAcquire(t.Context(), k)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", k, err)
		}
		hs[i] = h
	}
	return hs
}

// pttls reads the remaining ttl of each key's grant on the server.
func pttls(t testing.TB, c redis.UniversalClient, keys []string) []time.Duration {
	t.Helper()
	pipe := c.Pipeline()
	cmds := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.PTTL(t.Context(), redislock.DefaultPrefix+"l"+encode(k))
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatal(err)
	}
	out := make([]time.Duration, len(keys))
	for i, cmd := range cmds {
		out[i] = cmd.Val()
	}
	return out
}

// encode is the key's encoding in its Redis keys (keys.go).
func encode(k string) string {
	if strings.ContainsAny(k, "{}") {
		return "t:" + k // the keys here have tags of their own
	}
	return "k:{" + k + "}"
}

// 3,000 grants made for 10 s are renewed for a minute by one Renew of
// another batch (any handle of the Lock): every outcome is nil, every
// ValidUntil moved on as Extend's would, and the server holds every key
// for about a minute, across chunks of 1,000 keys and, on a Cluster,
// across slots.
func TestBatchRenewsAcrossChunksAndSlots(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		l := newLock(t, c)
		keys := batchKeys(runID(t), 3000)
		hs := acquireAll(t, newBatch(t, l, 10*time.Second), keys)
		before := make([]time.Time, len(hs))
		for i, h := range hs {
			before[i] = h.ValidUntil()
		}
		sent := time.Now()
		errs := newBatch(t, l, time.Minute).Renew(t.Context(), hs)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Renew of %q: %v", keys[i], err)
			}
			// As Extend: sent + ttl − drift allowance, from a time taken
			// just before sending.
			if v := hs[i].ValidUntil(); v.Before(sent.Add(50*time.Second)) || v.After(time.Now().Add(time.Minute)) || !v.After(before[i]) {
				t.Fatalf("%q: ValidUntil %v, before %v, renewed at %v", keys[i], v, before[i], sent)
			}
		}
		for i, left := range pttls(t, c, keys) {
			if left < 50*time.Second {
				t.Fatalf("%q: %v left on the server after a renewal for a minute", keys[i], left)
			}
		}
	})
}

// onBoth runs f on a single server and on a three-master Cluster.
func onBoth(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	for _, cluster := range []bool{false, true} {
		t.Run(fmt.Sprintf("cluster=%v", cluster), func(t *testing.T) { f(t, batchClient(t, cluster)) })
	}
}

func batchClient(t testing.TB, cluster bool) redis.UniversalClient {
	if cluster {
		return newClusterClient(t, testenv.NewRedis(t, testenv.Members(3)).Endpoints())
	}
	return newClient(t, testenv.Redis(t).Addr())
}

// One grant taken by force, and one taken over by another owner, among
// many: Renew reports those two as lost (and leaves their ValidUntil), and
// renews the others; the new owner's grant is untouched.
func TestBatchReportsALostGrantAlone(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		l := newLock(t, c)
		other := newLock(t, c)
		ctx := t.Context()
		keys := batchKeys(runID(t), 300)
		b := newBatch(t, l, time.Minute)
		hs := acquireAll(t, b, keys)
		const forced, taken = 17, 199
		for _, i := range []int{forced, taken} {
			if ok, err := l.ForceRelease(ctx, keys[i]); !ok || err != nil {
				t.Fatalf("ForceRelease: %v %v", ok, err)
			}
		}
		theirs, err := other.TryAcquire(ctx, keys[taken], time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		valid := [2]time.Time{hs[forced].ValidUntil(), hs[taken].ValidUntil()}
		errs := b.Renew(ctx, hs)
		for i, err := range errs {
			switch i {
			case forced, taken:
				if !errors.Is(err, lock.ErrLost) {
					t.Errorf("%q: %v, want ErrLost", keys[i], err)
				}
			default:
				if err != nil {
					t.Errorf("%q: %v", keys[i], err)
				}
			}
		}
		if hs[forced].ValidUntil() != valid[0] || hs[taken].ValidUntil() != valid[1] {
			t.Errorf("a lost grant's ValidUntil moved")
		}
		g, ok, err := l.Inspect(ctx, keys[taken])
		if err != nil || !ok || g.Token != theirs.Token() {
			t.Fatalf("the new owner's grant: %+v %v %v", g, ok, err)
		}
		if err := theirs.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("the new owner's Extend: %v", err)
		}
		if _, ok, _ := l.Inspect(ctx, keys[forced]); ok {
			t.Errorf("Renew recreated a grant taken by force")
		}
		// The others are still the batch's: their own Release works.
		if err := hs[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Renew(ctx, hs[:1])[0]; !errors.Is(err, lock.ErrLost) {
			t.Errorf("Renew after Release: %v, want ErrLost", err)
		}
	})
}

// Handles a batch cannot renew are refused alone: a share, a handle of
// another Lock; a closed batch refuses everything.
func TestBatchRefusals(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	l, other := newLock(t, c), newLock(t, c)
	ctx := t.Context()
	key := runID(t)
	b := newBatch(t, l, time.Minute)
	mine, err := b.TryAcquire(ctx, key+"/mine")
	if err != nil {
		t.Fatal(err)
	}
	share, err := l.TryAcquireShared(ctx, key+"/shared", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.TryAcquire(ctx, key+"/foreign", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	errs := b.Renew(ctx, []lock.Handle{share, mine, foreign})
	if !errors.Is(errs[0], lock.ErrInvalidArgument) || errs[1] != nil || !errors.Is(errs[2], lock.ErrInvalidArgument) {
		t.Fatalf("Renew(share, mine, foreign) = %v", errs)
	}
	if _, err := l.NewBatch(ctx, time.Millisecond); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("NewBatch(1ms): %v", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Renew(ctx, []lock.Handle{mine})[0]; !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("Renew after Close: %v", err)
	}
	if _, err := b.TryAcquire(ctx, key+"/late"); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Errorf("TryAcquire after Close: %v", err)
	}
	// The grant stays after Close, until released.
	if err := mine.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend after the batch's Close: %v", err)
	}
	if err := mine.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A server that stops answering: Renew ends within its deadline, every
// outcome is unknown (ErrUnavailable, not ErrLost), and no ValidUntil
// moves, so the leases end at their ValidUntil. ClaimEach ends within its
// deadline too, every claim unknown.
func TestBatchStalledRenew(t *testing.T) {
	for _, honours := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			p := faultproxy.Start(t, testenv.Redis(t).Addr())
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: honours, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			l := newLock(t, c)
			b := newBatch(t, l, time.Minute)
			hs := acquireAll(t, b, batchKeys(runID(t), 1500))
			before := make([]time.Time, len(hs))
			for i, h := range hs {
				before[i] = h.ValidUntil()
			}
			p.SetMode(faultproxy.Blackhole)
			defer p.SetMode(faultproxy.Pass)
			faultproxy.ExpectWithinDeadline(t, 200*time.Millisecond, 300*time.Millisecond,
				faultproxy.Op{Name: "Renew", Call: func(ctx context.Context) error {
					errs := b.Renew(ctx, hs)
					for i, err := range errs {
						if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrLost) {
							t.Errorf("outcome %d: %v, want unknown (ErrUnavailable)", i, err)
						}
						if hs[i].ValidUntil() != before[i] {
							t.Errorf("handle %d: ValidUntil moved on an unknown outcome", i)
						}
					}
					return errs[0]
				}},
				faultproxy.Op{Name: "ClaimEach", Call: func(ctx context.Context) error {
					res := l.ClaimEach(ctx, []lock.ClaimRequest{{Key: runID(t), TTL: time.Minute}, {Key: runID(t) + "/2", TTL: time.Minute}})
					for _, r := range res {
						if !errors.Is(r.Err, lock.ErrUnavailable) {
							t.Errorf("ClaimEach on a stalled server: %v, want ErrUnavailable", r.Err)
						}
					}
					return res[0].Err
				}},
			)
		})
	}
}

// The number of commands a Renew sends: one script per chunk of at most
// 1,000 keys (per slot on a Cluster), all in one pipeline; after a SCRIPT
// FLUSH, those scripts again by EVAL in a second pipeline.
func TestBatchRenewRoundTrips(t *testing.T) {
	onBoth(t, func(t *testing.T, c redis.UniversalClient) {
		rec := &pipelines{}
		c.AddHook(rec)
		l := newLock(t, c)
		ctx := t.Context()
		// 2,500 keys of one tag (3 chunks) and, on a Cluster, 1,200 of
		// another (2 chunks); on a single server the 3,700 keys make
		// 4 chunks whatever their tags.
		prefix := runID(t)
		var keys []string
		for i := range 2500 {
			keys = append(keys, fmt.Sprintf("%s/{a}/%d", prefix, i))
		}
		for i := range 1200 {
			keys = append(keys, fmt.Sprintf("%s/{b}/%d", prefix, i))
		}
		want := 4
		if _, cluster := c.(*redis.ClusterClient); cluster {
			want = 5
		}
		b := newBatch(t, l, time.Minute)
		hs := acquireAll(t, b, keys)
		check := func(what string, wantCmds []string) {
			t.Helper()
			rec.take()
			for i, err := range b.Renew(ctx, hs) {
				if err != nil {
					t.Fatalf("%s: %q: %v", what, keys[i], err)
				}
			}
			got := rec.take()
			if len(got) != len(wantCmds) {
				t.Fatalf("%s: %d pipelines %v, want %v", what, len(got), got, wantCmds)
			}
			for i := range got {
				if got[i] != wantCmds[i] {
					t.Errorf("%s: pipeline %d sent %s, want %s", what, i, got[i], wantCmds[i])
				}
			}
		}
		scripts := func(name string) string { return strings.TrimSpace(strings.Repeat(name+" ", want)) }
		b.Renew(ctx, hs) // loads the script where it is not
		check("scripts loaded", []string{scripts("EVALSHA")})
		flush(t, c)
		check("scripts unknown to the server", []string{scripts("EVALSHA"), scripts("EVAL")})
	})
}

// flush drops every script of the server (of every master of a Cluster).
func flush(t testing.TB, c redis.UniversalClient) {
	t.Helper()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
	} else {
		err = c.ScriptFlush(t.Context()).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// pipelines records the scripts of each pipeline a client runs (a
// Cluster client's pipeline is one, though it goes to each node).
type pipelines struct {
	commands
}

func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, cmd := range cmds {
			if name := strings.ToUpper(cmd.Name()); strings.HasPrefix(name, "EVAL") {
				names = append(names, name)
			}
		}
		if names == nil { // a connection's setup
			return next(ctx, cmds)
		}
		p.mu.Lock()
		p.names = append(p.names, strings.Join(names, " "))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (p *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// A Keeper whose batch cannot reach the server: each lease's context
// ends, with ErrLost, at its own ValidUntil, neither before (a renewal
// whose outcome is unknown is not a loss: connections refused fail at
// once, well before ValidUntil) nor seconds later (a server that stops
// answering holds the renewal until its deadline).
func TestKeeperOnAnUnreachableServer(t *testing.T) {
	for _, fault := range []string{"blackhole", "refused"} {
		t.Run(fault, func(t *testing.T) {
			p := faultproxy.Start(t, testenv.Redis(t).Addr())
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			l := newLock(t, c)
			const ttl = 900 * time.Millisecond
			k, err := lock.NewKeeper(l, ttl)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k.Close(context.Background()) })
			prefix := runID(t)
			leases := make([]*lock.Lease, 50)
			for i := range leases {
				if leases[i], err = k.TryAcquire(t.Context(), fmt.Sprintf("%s/%d", prefix, i)); err != nil {
					t.Fatal(err)
				}
			}
			if fault == "blackhole" {
				p.SetMode(faultproxy.Blackhole)
				defer p.SetMode(faultproxy.Pass)
			} else {
				p.Refuse(true)
				p.ResetAll()
				defer p.Refuse(false)
			}
			cut := time.Now()
			const slack = 300 * time.Millisecond
			for i, le := range leases {
				select {
				case <-le.Context().Done():
				case <-time.After(time.Until(le.ValidUntil()) + 2*time.Second):
					t.Fatalf("lease %d still open 2 s after its ValidUntil", i)
				}
				ended, valid := time.Now(), le.ValidUntil()
				if early := valid.Sub(ended); early > 20*time.Millisecond {
					t.Errorf("lease %d ended %v before its ValidUntil, %v after the fault", i, early, ended.Sub(cut))
				}
				if late := ended.Sub(valid); late > slack {
					t.Errorf("lease %d ended %v after its ValidUntil", i, late)
				}
				if !errors.Is(context.Cause(le.Context()), lock.ErrLost) {
					t.Errorf("lease %d: cause %v, want ErrLost", i, context.Cause(le.Context()))
				}
			}
		})
	}
}
