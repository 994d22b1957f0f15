package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// BenchmarkScriptServerTime measures how long the scripts over sets run on
// the server, at the largest size each takes, each on a server of its own
// with nothing else on it. SLOWLOG (commands over 100 µs: a threshold of 0
// would log every command a script runs, which costs more than the
// command) gives each script's longest run (max-µs) and mean (mean-µs), in
// wall time, which a loaded machine inflates; the server's CPU time (INFO
// cpu) per iteration (cpu-µs/op) is not inflated so.
func BenchmarkScriptServerTime(b *testing.B) {
	keys := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s/{t}/%d", prefix, i)
		}
		return out
	}
	cases := []struct {
		name   string
		script *rediscall.Script
		setup  func(b *testing.B, l *Lock, c *redis.Client) func(ctx context.Context, i int)
	}{
		{"renew_batch/" + strconv.Itoa(renewChunk), renewBatchScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			bt, _ := l.NewBatch(b.Context(), time.Minute)
			hs := make([]lock.Handle, 0, renewChunk)
			for _, k := range keys("renew", renewChunk) {
				h, err := bt.TryAcquire(b.Context(), k)
				if err != nil {
					b.Fatal(err)
				}
				hs = append(hs, h)
			}
			return func(ctx context.Context, _ int) { mustAll(b, bt.Renew(ctx, hs)) }
		}},
		{"claim_each/" + strconv.Itoa(claimChunk), claimEachScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			return func(ctx context.Context, i int) {
				reqs := make([]lock.ClaimRequest, claimChunk)
				for j, k := range keys("claim/"+strconv.Itoa(i), claimChunk) {
					reqs[j] = lock.ClaimRequest{Key: k, TTL: 2 * time.Second}
				}
				for _, r := range l.ClaimEach(ctx, reqs) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
		}},
		// The claims of the two other schedulers of an instant: every key
		// is held, so each claim is refused with the key's remaining ttl.
		{"claim_each/" + strconv.Itoa(claimChunk) + "-held", claimEachScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			reqs := make([]lock.ClaimRequest, claimChunk)
			for j, k := range keys("held", claimChunk) {
				reqs[j] = lock.ClaimRequest{Key: k, TTL: time.Hour}
			}
			for _, r := range l.ClaimEach(b.Context(), reqs) {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			return func(ctx context.Context, _ int) {
				for _, r := range l.ClaimEach(ctx, reqs) {
					if !errors.Is(r.Err, lock.ErrNotAcquired) {
						b.Fatal("claimed a held key:", r.Err)
					}
				}
			}
		}},
		{"release_each/" + strconv.Itoa(releaseChunk), releaseEachScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			return func(ctx context.Context, i int) {
				b.StopTimer()
				hs := make([]lock.Handle, 0, releaseChunk)
				for _, k := range keys("release/"+strconv.Itoa(i), releaseChunk) {
					h, err := l.TryAcquire(ctx, k, time.Minute)
					if err != nil {
						b.Fatal(err)
					}
					hs = append(hs, h)
				}
				b.StartTimer()
				mustAll(b, l.ReleaseEach(ctx, hs))
			}
		}},
		{"acquire/any-of-" + strconv.Itoa(scriptKeys) + "-held", acquireScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			ks := keys("any", scriptKeys)
			for _, k := range ks {
				if _, err := l.TryAcquire(b.Context(), k, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
			return func(ctx context.Context, _ int) {
				if _, err := l.TryAcquireAny(ctx, ks, time.Minute); err == nil {
					b.Fatal("granted a held key")
				}
			}
		}},
		// A full chunk at its costliest: every request takes a key, after
		// finding the other held (when its random start is on it).
		{"acquire_each/" + strconv.Itoa(anyEachRequests) + "-requests-of-2-keys", acquireEachScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			return func(ctx context.Context, i int) {
				ks := keys("each/"+strconv.Itoa(i), anyEachKeys)
				for j := 0; j < len(ks); j += 2 {
					if _, err := l.TryAcquire(ctx, ks[j], time.Hour); err != nil {
						b.Fatal(err)
					}
				}
				mustAny(b, l.TryAcquireAnyEach(ctx, anyEachReqs(ks, 2)))
			}
		}},
		// A timers' instant: each request takes the one slot of its
		// timer's semaphore.
		{"acquire_each/" + strconv.Itoa(anyEachRequests) + "-requests-of-1-key", acquireEachScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			return func(ctx context.Context, i int) {
				mustAny(b, l.TryAcquireAnyEach(ctx, anyEachReqs(keys("one/"+strconv.Itoa(i), anyEachRequests), 1)))
			}
		}},
		{"acquire_all/" + strconv.Itoa(MaxGroupKeys), acquireAllScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			ks := keys("all", MaxGroupKeys)
			return func(ctx context.Context, _ int) {
				g, err := l.TryAcquireAll(ctx, ks, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Extend(ctx, time.Minute); err != nil {
					b.Fatal(err)
				}
				if err := g.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"extend_all/" + strconv.Itoa(MaxGroupKeys), extendAllScript, nil},
		{"release_all/" + strconv.Itoa(MaxGroupKeys), releaseAllScript, nil},
		{"acquire_shared/settle-1000-expired", acquireSharedScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			return func(ctx context.Context, i int) {
				key := "shares/" + strconv.Itoa(i)
				rk, _ := l.keysOf(key, nil)
				shares, attempts := l.shareKeys(rk)
				pipe := c.Pipeline()
				pipe.Set(ctx, rk[0], "S|0", time.Minute)
				for j := range 1000 {
					v := fmt.Sprintf("%d|1|a%d|o", j+1, j)
					pipe.ZAdd(ctx, shares, redis.Z{Score: 1, Member: v})
					pipe.HSet(ctx, attempts, "a"+strconv.Itoa(j), v)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := l.TryAcquireShared(ctx, key, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"waiting/10000-waiters", waitingScript, func(b *testing.B, l *Lock, c *redis.Client) func(context.Context, int) {
			key := "queue"
			pipe := c.Pipeline()
			for j := range 10000 {
				w := "w" + strconv.Itoa(j)
				pipe.ZAdd(b.Context(), l.queueKey(key), redis.Z{Score: float64(j), Member: w})
				pipe.HSet(b.Context(), l.deadlinesKey(key), w, "99999999999999|1000|0|inbox|o")
			}
			if _, err := pipe.Exec(b.Context()); err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, _ int) {
				if n, err := l.Waiting(ctx, key); err != nil || n != 10000 {
					b.Fatal(n, err)
				}
			}
		}},
	}
	for _, tc := range cases {
		if tc.setup == nil {
			continue // measured within another case
		}
		b.Run(tc.name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: testenv.NewRedis(b).Addr()})
			b.Cleanup(func() { _ = c.Close() })
			l, err := New(c)
			if err != nil {
				b.Fatal(err)
			}
			ctx := b.Context()
			run := tc.setup(b, l, c)
			for _, cfg := range [][2]string{{"slowlog-log-slower-than", "100"}, {"slowlog-max-len", "100000"}} {
				if err := c.ConfigSet(ctx, cfg[0], cfg[1]).Err(); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.SlowLogReset(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			cpu0 := serverCPU(b, c)
			i := 0
			for b.Loop() {
				run(ctx, i)
				i++
			}
			b.StopTimer()
			b.ReportMetric(float64((serverCPU(b, c)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			logs, err := c.SlowLogGet(ctx, -1).Result()
			if err != nil {
				b.Fatal(err)
			}
			names := map[string]string{}
			for _, other := range cases {
				names[other.script.Hash()] = other.name
			}
			names[tc.script.Hash()] = tc.name
			type stat struct {
				n        int
				max, sum time.Duration
			}
			stats := map[string]*stat{}
			for _, e := range logs {
				if len(e.Args) < 2 || e.Args[0] != "evalsha" && e.Args[0] != "EVALSHA" {
					continue
				}
				name := names[e.Args[1]]
				if name == "" {
					continue
				}
				s := stats[name]
				if s == nil {
					s = &stat{}
					stats[name] = s
				}
				s.n++
				s.sum += e.Duration
				s.max = max(s.max, e.Duration)
			}
			for name, s := range stats {
				unit := name
				if name == tc.name {
					unit = ""
				} else {
					unit = "-" + name
				}
				b.ReportMetric(float64(s.max.Microseconds()), "max-µs"+unit)
				b.ReportMetric(float64(s.sum.Microseconds())/float64(s.n), "mean-µs"+unit)
			}
		})
	}
}

// anyEachReqs are requests of per keys each, over keys in turn.
func anyEachReqs(keys []string, per int) []lock.AnyRequest {
	reqs := make([]lock.AnyRequest, 0, len(keys)/per)
	for i := 0; i+per <= len(keys); i += per {
		reqs = append(reqs, lock.AnyRequest{Keys: keys[i : i+per], TTL: 2 * time.Second})
	}
	return reqs
}

func mustAny(b *testing.B, res []lock.AnyResult) {
	for _, r := range res {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

func mustAll(b *testing.B, errs []error) {
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// serverCPU is the CPU time the server has used, user and system.
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(b.Context(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(line, ":")
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}
