package redislock

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// keySlot agrees with the server's CLUSTER KEYSLOT, on the Redis keys of
// user keys with and without hash tags.
func TestKeySlot(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.NewRedis(t, testenv.Members(3)).Endpoints()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		for _, k := range []string{strconv.Itoa(i), "a/{t" + strconv.Itoa(i) + "}/b", "{}" + strconv.Itoa(i), "é" + strconv.Itoa(i)} {
			rk := l.lockKey(k)
			want, err := c.ClusterKeySlot(t.Context(), rk).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := keySlot(rk); int64(got) != want {
				t.Fatalf("keySlot(%q) = %d, want %d", rk, got, want)
			}
		}
	}
}

// chunks: at most size items each, of one slot on a Cluster, in
// order on a single server.
func TestChunks(t *testing.T) {
	keys := make([]string, 2500)
	for i := range keys {
		keys[i] = "{" + strconv.Itoa(i%2) + "}" + strconv.Itoa(i)
	}
	key := func(i int) string { return keys[i] }
	single := &Lock{client: redis.NewClient(&redis.Options{})}
	order, ends := single.chunks(len(keys), 1000, key)
	if len(ends) != 3 || ends[0] != 1000 || ends[1] != 2000 || ends[2] != 2500 || order[1999] != 1999 {
		t.Fatalf("single server: ends %v", ends)
	}
	cluster := &Lock{client: redis.NewClusterClient(&redis.ClusterOptions{})}
	order, ends = cluster.chunks(len(keys), 1000, key)
	if len(ends) != 4 || ends[0] != 1000 || ends[1] != 1250 || ends[2] != 2250 || ends[3] != 2500 {
		t.Fatalf("cluster: ends %v", ends)
	}
	start := 0
	for _, end := range ends {
		for _, i := range order[start:end] {
			if keySlot(keys[i]) != keySlot(keys[order[start]]) {
				t.Fatalf("chunk %d..%d mixes slots", start, end)
			}
		}
		start = end
	}
	if _, ends := single.chunks(0, 1000, key); len(ends) != 0 {
		t.Fatalf("no items: ends %v", ends)
	}
}

// Waiting counts a queue longer than one script looks at (1,000 waiters),
// leaving out the waiters whose place lapsed.
func TestWaitingCountsALongQueue(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	key := "waiting/" + t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pipe := c.Pipeline()
	for j := range 2500 {
		w := "w" + strconv.Itoa(j)
		deadline := "99999999999999"
		if j%25 == 0 {
			deadline = "1" // lapsed
		}
		pipe.ZAdd(ctx, l.queueKey(key), redis.Z{Score: float64(j), Member: w})
		pipe.HSet(ctx, l.deadlinesKey(key), w, deadline+"|1000|0|inbox|o")
	}
	pipe.Expire(ctx, l.queueKey(key), time.Minute)
	pipe.Expire(ctx, l.deadlinesKey(key), time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Waiting(ctx, key); err != nil || n != 2400 {
		t.Fatalf("Waiting = %d, %v; want 2400", n, err)
	}
}

// List reads a key's shares in pages of sharesPage (no single read of an
// unbounded set) and reports every live one.
func TestListReadsManySharesInPages(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.Redis(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	key := "shares/" + t.Name() + "/" + strconv.FormatInt(time.Now().UnixNano(), 36)
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	rk, _ := l.keysOf(key, nil)
	shares, _ := l.shareKeys(rk)
	const n = 2*sharesPage + 345
	pipe := c.Pipeline()
	pipe.Set(ctx, rk[0], "S|0", time.Minute)
	for j := range n {
		expiry := now.UnixMilli() + 60_000
		if j%100 == 0 {
			expiry = now.UnixMilli() - 1 // expired, not yet pruned
		}
		pipe.ZAdd(ctx, shares, redis.Z{Score: float64(expiry), Member: strconv.Itoa(j+1) + "|1|a" + strconv.Itoa(j) + "|o"})
	}
	pipe.Expire(ctx, shares, time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	grants, err := l.List(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := n - (n+99)/100; len(grants) != want {
		t.Fatalf("List: %d shares, want %d", len(grants), want)
	}
}
