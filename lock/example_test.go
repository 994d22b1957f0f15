package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func ExampleDo() {
	l, err := memlock.New() // or redislock, pglock, etcdlock: the same contract
	if err != nil {
		log.Fatal(err)
	}
	var ledger lock.Fence
	err = lock.Do(context.Background(), l, "reports/daily", func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		return ledger.Do(token, func() { fmt.Println("writing the report under token", token) })
	}, lock.WithTTL(10*time.Second))
	fmt.Println("err:", err)
	// Output:
	// writing the report under token 1
	// err: <nil>
}

func ExampleAcquire() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := lock.Acquire(ctx, l, "inventory", 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer h.Release(context.Background())
	fmt.Println("holding", h.Key(), "token", h.Token())
	// Output: holding inventory token 1
}

func ExampleKeep() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, err := l.TryAcquire(ctx, "compaction", 3*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := lock.Keep(ctx, h, 3*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Long work watches lease.Context(): it is cancelled with a cause
	// matching lock.ErrLost the moment the grant is in doubt.
	select {
	case <-lease.Context().Done():
		fmt.Println("lost:", context.Cause(lease.Context()))
	case <-time.After(10 * time.Millisecond):
		fmt.Println("work done, still the holder")
	}
	fmt.Println("release:", lease.Release(ctx))
	// Output:
	// work done, still the holder
	// release: <nil>
}

func ExampleLock_tryAcquire() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "k", time.Minute)
	other, err := l.Share() // a second instance over the same grants: another host
	if err != nil {
		log.Fatal(err)
	}
	_, err = other.TryAcquire(ctx, "k", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	_ = h.Release(ctx)
	fmt.Println(errors.Is(h.Release(ctx), lock.ErrLost)) // a second Release
	// Output:
	// true
	// true
}

func ExampleFence() {
	var f lock.Fence
	fmt.Println(f.Do(7, func() { fmt.Println("write by grant 7") }))
	fmt.Println(f.Do(8, func() { fmt.Println("write by grant 8") }))
	err := f.Do(7, func() { fmt.Println("never printed") }) // grant 7 was paused past its ttl
	fmt.Println(errors.Is(err, lock.ErrStaleToken))
	// Output:
	// write by grant 7
	// <nil>
	// write by grant 8
	// <nil>
	// true
}

func ExampleTokenFrom() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	_ = lock.Do(context.Background(), l, "report", func(ctx context.Context) error {
		token, ok := lock.TokenFrom(ctx) // pass it to the protected resource
		fmt.Println(token, ok)
		return nil
	})
	// Output: 1 true
}

func ExampleOwnerOf() {
	l, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "worker-1"}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(backendkit.OwnerOf(l, "configured"))
	hidden := struct{ lock.Lock }{l} // a wrapper that is not lock.Owned
	fmt.Println(backendkit.OwnerOf(hidden, "configured"))
	// Output:
	// worker-1
	// configured
}

func ExampleHealthCheck() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = lock.HealthCheck(context.Background(), l)
	fmt.Println("healthy:", err == nil)
	// Output: healthy: true
}

func ExampleRemainingTTL() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	_, _ = l.TryAcquire(context.Background(), "k", time.Minute)
	other, err := l.Share() // a second instance over the same grants: another host
	if err != nil {
		log.Fatal(err)
	}
	_, err = other.TryAcquire(context.Background(), "k", time.Minute)
	fmt.Println(lock.RemainingTTL(err) > 59*time.Second)
	// Output: true
}

// Whoever claims a one-off key first does the work; the others see it
// taken. The claim is never released: it lapses after its ttl.
func ExampleClaim() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, host := range []string{"host-a", "host-b"} {
		token, err := lock.Claim(ctx, l, "invoices/2026-11-22", time.Hour)
		switch {
		case errors.Is(err, lock.ErrNotAcquired):
			fmt.Println(host, "sees it claimed")
		case err != nil:
			fmt.Println(host, "error:", err)
		default:
			fmt.Println(host, "claimed it, token", token)
		}
	}
	// Output:
	// host-a claimed it, token 1
	// host-b sees it claimed
}

func ExampleHold() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// A grant taken some other way (TryAcquire, a semaphore permit, an
	// election); Hold keeps it alive while fn runs, then releases it.
	h, err := l.TryAcquire(ctx, "leader", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	var fence lock.Fence
	err = lock.Hold(ctx, h, 10*time.Second, func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		return fence.Do(token, func() { fmt.Println("leading under token", token) })
	})
	fmt.Println("err:", err)
	other, err := l.Share() // a second instance over the same grants: another host
	if err != nil {
		log.Fatal(err)
	}
	_, err = other.TryAcquire(ctx, "leader", time.Second)
	fmt.Println("released:", err == nil)
	// Output:
	// leading under token 1
	// err: <nil>
	// released: true
}

// A fresh identity per process: readable in listings ("hostname/pid/random")
// and unique even when a host runs several processes. Backends use it when
// no Common.Owner is given.
func ExampleNewOwner() {
	owner := lock.NewOwner()
	fmt.Println(backendkit.CheckOwner("owner", owner) == nil, owner != lock.NewOwner())
	// Output: true true
}

// Keys are opaque bytes: check one that comes from user input before it
// reaches a backend.
func ExampleCheckKey() {
	for _, key := range []string{"tenants/42/export", "", strings.Repeat("k", lock.MaxKeyLen+1)} {
		err := lock.CheckKey(key)
		fmt.Println(len(key), errors.Is(err, lock.ErrInvalidKey), errors.Is(err, lock.ErrInvalidArgument))
	}
	// Output:
	// 17 false false
	// 0 true true
	// 1025 true true
}

// The rule for names that tools turn into keys (semaphores, elections,
// timers): check a name taken from configuration before building on it.
func ExampleCheckName() {
	for _, name := range []string{"billing/eu", "gpu{pool}", ""} {
		if err := backendkit.CheckName("semaphore name", name); err != nil {
			fmt.Println(errors.Is(err, lock.ErrInvalidArgument), err)
			continue
		}
		fmt.Println("ok:", name)
	}
	// Output:
	// ok: billing/eu
	// true lock: invalid argument: semaphore name "gpu{pool}" contains a brace
	// true lock: invalid argument: semaphore name "" is empty
}

// An owner identity from the environment (a pod name) is checked before
// it is stored with every grant.
func ExampleCheckOwner() {
	for _, owner := range []string{"billing-7f9c-x2", "pod\nforged"} {
		fmt.Println(errors.Is(backendkit.CheckOwner("worker identity", owner), lock.ErrInvalidArgument))
	}
	// Output:
	// false
	// true
}

func ExampleFence_Highest() {
	var f lock.Fence
	_ = f.Do(3, func() {})
	_ = f.Do(2, func() {}) // stale: refused
	fmt.Println(f.Highest())
	// Output: 3
}

// A lease tells its holder the moment the grant is gone: here an operator
// force-releases the key while the work runs.
func ExampleLease_Err() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, err := l.TryAcquire(ctx, "migrations", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := lock.Keep(ctx, h, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = l.ForceRelease(ctx, "migrations") // an operator steps in
	<-lease.Context().Done()                 // the work is told to stop
	fmt.Println(errors.Is(lease.Err(), lock.ErrLost), errors.Is(context.Cause(lease.Context()), lock.ErrLost))
	fmt.Println(errors.Is(lease.Release(ctx), lock.ErrLost)) // nothing left to release
	// Output:
	// true true
	// true
}

// What a lease exposes to the work it protects.
func ExampleLease() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "exports/eu", 30*time.Second)
	lease, err := lock.Keep(ctx, h, 30*time.Second, lock.WithRenewInterval(5*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	fmt.Println(lease.Handle().Key(), lease.Token())
	// Trust the grant until ValidUntil at most; the lease renews it before.
	fmt.Println(time.Until(lease.ValidUntil()) > 20*time.Second)
	// Output:
	// exports/eu 1
	// true
}

// Renewing by hand, without Keep: the three outcomes of Extend.
func ExampleHandle() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, err := l.TryAcquire(ctx, "index/rebuild", 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	switch err := h.Extend(ctx, 30*time.Second); {
	case err == nil:
		fmt.Println("renewed for", time.Until(h.ValidUntil()).Round(10*time.Second))
	case errors.Is(err, lock.ErrLost):
		fmt.Println("lost: stop writing")
	default:
		fmt.Println("unknown: trust the grant until", h.ValidUntil())
	}
	fmt.Println(h.Release(ctx))
	// Output:
	// renewed for 30s
	// <nil>
}

// A caller that wants the holder's remaining ttl reads it from the error.
func ExampleNotAcquiredError() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "reports/daily", time.Hour)
	other, err := l.Share() // a second instance over the same grants: another host
	if err != nil {
		log.Fatal(err)
	}
	_, err = other.TryAcquire(ctx, "reports/daily", time.Minute)
	var held *lock.NotAcquiredError
	if errors.As(err, &held) {
		fmt.Println(held.Key, "is held for about", held.Remaining.Round(time.Hour))
	}
	fmt.Println(errors.Is(err, lock.ErrNotAcquired))
	// Output:
	// reports/daily is held for about 1h0m0s
	// true
}

// A tool that takes ttls from its configuration checks them against the
// backend's limits where they are read, not at the first acquire.
func ExampleLimitsOf() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	lim := lock.LimitsOf(l)
	fmt.Println(lim.CheckTTL(30*time.Second) == nil)
	fmt.Println(errors.Is(lim.CheckTTL(0), lock.ErrInvalidTTL))
	fmt.Println(errors.Is(lim.CheckTTL(lock.MaxTTL+time.Hour), lock.ErrInvalidTTL))
	// Output:
	// true
	// true
	// true
}

func ExampleLimits_CheckKeys() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	lim := lock.LimitsOf(l)
	fmt.Println(lim.CheckKeys([]string{"gpu/0", "gpu/1"}))
	fmt.Println(errors.Is(lim.CheckKeys(nil), lock.ErrInvalidArgument))
	// Output:
	// <nil>
	// true
}

// Inspector is optional: assert it, as an operator's tool does.
func ExampleInspector() {
	l2, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	var l lock.Lock = l2
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "reports/daily", time.Minute)
	insp, ok := l.(lock.Inspector)
	if !ok {
		fmt.Println("this backend cannot say who holds what")
		return
	}
	g, held, err := insp.Inspect(ctx, "reports/daily")
	fmt.Println(held, g.Owner, g.Token, err)
	// Output: true host-a 1 <nil>
}

// A handle whose backend learns of a loss by itself closes Lost; Keep
// watches it for you, a hand-written loop can too.
func ExampleLossNotifier() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "k", time.Hour)
	ln, ok := h.(lock.LossNotifier)
	if !ok {
		return // only ValidUntil to go by
	}
	_, _ = l.ForceRelease(ctx, "k")
	<-ln.Lost()
	fmt.Println("lost")
	// Output: lost
}

// The first free key of a set in one call, when the backend can; the
// semaphore package does this for you.
func ExampleMultiLock() {
	l2, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	var l lock.Lock = l2
	ctx := context.Background()
	_, _ = l.TryAcquire(ctx, "gpu/0", time.Minute)
	keys := []string{"gpu/0", "gpu/1", "gpu/2"}
	if m, ok := l.(lock.MultiLock); ok {
		h, err := m.TryAcquireAny(ctx, keys, time.Minute)
		fmt.Println(h.Key() != "gpu/0", err)
		return
	}
	for _, k := range keys { // the generic path: one attempt per key
		if h, err := l.TryAcquire(ctx, k, time.Minute); err == nil {
			fmt.Println(h.Key() != "gpu/0", err)
			return
		}
	}
	// Output: true <nil>
}

// Queue is optional (memlock, pglock and redislock queue their waiters):
// an operator's tool asks how many callers wait for a key.
func ExampleQueue() {
	waiting := func(ctx context.Context, l lock.Lock, key string) string {
		q, ok := l.(lock.Queue)
		if !ok {
			return "no server-side queue"
		}
		n, err := q.Waiting(ctx, key)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprint(n, " waiting")
	}
	l2, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(waiting(context.Background(), l2, "reports/daily"))
	// Output: 0 waiting
}

// Waiting for a release without polling: subscribe first, then try.
// lock.Acquire does this for you.
func ExampleWaiter() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	held, _ := l.TryAcquire(ctx, "k", time.Hour)
	w, ok := lock.Lock(l).(lock.Waiter)
	if !ok {
		return
	}
	sub, err := w.Subscribe(ctx, "k")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()
	go func() { _ = held.Release(ctx) }()
	for {
		h, err := l.TryAcquire(ctx, "k", time.Minute)
		if err == nil {
			fmt.Println("got it, token", h.Token())
			return
		}
		if err := sub.Wait(ctx, lock.RemainingTTL(err)); err != nil {
			fmt.Println(err)
			return
		}
	}
	// Output: got it, token 2
}

// The options of the helpers. A backend without release notifications
// (here, a wrapper that hides memlock's) makes Acquire retry with
// backoff, never sleeping past the holder's remaining ttl.
func ExampleWithBackoff() {
	l2, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	l := struct{ lock.Lock }{l2} // not a lock.Waiter
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := lock.Acquire(ctx, l, "k", time.Minute, lock.WithBackoff(10*time.Millisecond, time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Release(ctx)
	fmt.Println("token", h.Token())
	// Output: token 1
}

// Keep renews every 10 s a 30 s grant, and gives it up 5 s before
// ValidUntil when renewals keep failing: the work has 5 s to stop before
// anyone else can be granted the key.
func ExampleWithMargin() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, _ := l.TryAcquire(ctx, "ledger", 30*time.Second)
	lease, err := lock.Keep(ctx, h, 30*time.Second, lock.WithRenewInterval(10*time.Second), lock.WithMargin(5*time.Second))
	fmt.Println(err)
	fmt.Println(lease.Release(ctx))
	// Output:
	// <nil>
	// <nil>
}

// Do's lease: its ttl and how often it is renewed.
func ExampleWithTTL() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(context.Background(), l, "nightly-export", func(ctx context.Context) error {
		return nil // the export; ctx ends if the lease is lost
	}, lock.WithTTL(2*time.Minute), lock.WithRenewInterval(20*time.Second))
	fmt.Println(err)
	// Output: <nil>
}

// Owner identity, logs, metrics and traces: one value, given whole to a
// backend and to every tool built on it.
func ExampleCommon() {
	common := lock.Common{
		Owner:          "billing-7f9c-x2", // stored with each grant, shown by Inspect
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		MeterProvider:  metricnoop.NewMeterProvider(), // otel: your SDK's provider
		TracerProvider: tracenoop.NewTracerProvider(),
	}
	l, err := memlock.New(memlock.WithCommon(common))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Owner())
	// The helpers log and record through the same providers.
	err = lock.Do(context.Background(), l, "reports/daily", func(ctx context.Context) error {
		return nil
	}, lock.WithCommon(common))
	fmt.Println(err)
	// Output:
	// billing-7f9c-x2
	// <nil>
}

// WithCommon merges: a zero field leaves what an earlier one set.
func ExampleCommon_Merge() {
	base := lock.Common{Owner: "host-a"}
	c := base.Merge(lock.Common{Logger: slog.New(slog.DiscardHandler)})
	fmt.Println(c.Owner, c.Logger != nil)
	// Output: host-a true
}

// Many readers hold a key at once; a writer waits for them to drain, and
// while it waits no new reader gets in.
func ExampleAcquireShared() {
	l, err := memlock.New() // a lock.SharedLock
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r1, err := lock.AcquireShared(ctx, l, "config", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	r2, err := lock.AcquireShared(ctx, l, "config", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers, tokens", r1.Token(), r2.Token())
	_, err = l.TryAcquire(ctx, "config", 10*time.Second)
	fmt.Println("writer:", errors.Is(err, lock.ErrNotAcquired))
	_, err = l.TryAcquireShared(ctx, "config", 10*time.Second)
	fmt.Println("a third reader while the writer waits:", errors.Is(err, lock.ErrNotAcquired))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := lock.Acquire(ctx, l, "config", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Release(context.Background())
	fmt.Println("writer, token", w.Token())
	// Output:
	// two readers, tokens 1 2
	// writer: true
	// a third reader while the writer waits: true
	// writer, token 3
}

// DoShared reads under a shared grant; writers are kept out until fn
// returns.
func ExampleDoShared() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	err = lock.DoShared(context.Background(), l, "catalog", func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		fmt.Println("reading the catalog under token", token)
		return nil
	}, lock.WithTTL(10*time.Second))
	fmt.Println("err:", err)
	// Output:
	// reading the catalog under token 1
	// err: <nil>
}

// AcquireAll takes "order 42" and "customer 7" together, or neither: two
// callers whose sets overlap cannot deadlock.
func ExampleAcquireAll() {
	l, err := memlock.New() // a lock.GroupLock
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := lock.AcquireAll(ctx, l, []string{"orders/42", "customers/7"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.Keys(), g.Tokens())
	_, err = l.TryAcquireAll(ctx, []string{"customers/7", "customers/8"}, 10*time.Second)
	fmt.Println("an overlapping set:", errors.Is(err, lock.ErrNotAcquired))
	if err := g.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// [orders/42 customers/7] [1 2]
	// an overlapping set: true
}

// DoAll runs fn holding every key of the set, each with its own token for
// its own fenced resource.
func ExampleDoAll() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	var orders, customers lock.Fence
	err = lock.DoAll(context.Background(), l, []string{"orders/42", "customers/7"}, func(ctx context.Context, g lock.Group) error {
		t := g.Tokens()
		if err := orders.Do(t[0], nil); err != nil {
			return err
		}
		return customers.Do(t[1], func() { fmt.Println("moved order 42 to customer 7 under tokens", t) })
	}, lock.WithTTL(10*time.Second))
	fmt.Println("err:", err)
	// Output:
	// moved order 42 to customer 7 under tokens [1 2]
	// err: <nil>
}

// A process that owns many things at once (partitions, tenants, shards)
// holds them through one Keeper: one goroutine and one renewal round per
// period for all of them, each lease on its own when it is lost.
func ExampleKeeper() {
	l, err := memlock.New() // redislock, etcdlock and pglock batch their renewals
	if err != nil {
		log.Fatal(err)
	}
	k, err := lock.NewKeeper(l, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(context.Background())
	for p := range 3 {
		lease, err := k.TryAcquire(context.Background(), fmt.Sprintf("partitions/%d", p))
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			<-lease.Context().Done() // this partition's work stops here
		}()
	}
	fmt.Println("held:", k.Len(), "ttl:", k.TTL())
	// Output: held: 3 ttl: 30s
}

func ExampleKeeper_Acquire() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	k, err := lock.NewKeeper(l, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := k.Acquire(ctx, "tenants/acme") // waits while another holds it
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	fmt.Println("token:", lease.Token())
	// Output: token: 1
}

func ExampleKeeper_Keep() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	k, err := lock.NewKeeper(l, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(context.Background())
	h, err := l.TryAcquire(context.Background(), "shards/7", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	lease, err := k.Keep(context.Background(), h) // renewed with the Keeper's others
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lease.Handle().Key(), k.Len())
	// Output: shards/7 1
}

// A grant already held (a semaphore permit, a claimed slot) runs its work
// under a Keeper's lease, and is released when the work returns.
func ExampleKeeper_Hold() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	k, err := lock.NewKeeper(l, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(context.Background())
	h, err := l.TryAcquire(context.Background(), "slots/3", k.TTL())
	if err != nil {
		log.Fatal(err)
	}
	err = k.Hold(context.Background(), h, func(ctx context.Context) error {
		token, _ := lock.TokenFrom(ctx)
		fmt.Println("token", token, "kept with", k.Len(), "lease")
		return nil
	})
	fmt.Println("err:", err, "held after:", k.Len())
	// Output:
	// token 1 kept with 1 lease
	// err: <nil> held after: 0
}

// Hold and Do keep their grant through a Keeper with WithKeeper: a
// component that runs many holds at once (timers' runs) uses one.
func ExampleWithKeeper() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	k, err := lock.NewKeeper(l, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(context.Background())
	err = lock.Do(context.Background(), l, "reports/weekly", func(ctx context.Context) error {
		fmt.Println("kept by the Keeper:", k.Len())
		return nil
	}, lock.WithTTL(10*time.Second), lock.WithKeeper(k))
	if err != nil {
		log.Fatal(err)
	}
	// Output: kept by the Keeper: 1
}

// The claims of many ticks due at one instant, in one call.
func ExampleClaimEach() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	reqs := []lock.ClaimRequest{{Key: "tick/a/100", TTL: time.Minute}, {Key: "tick/b/100", TTL: time.Minute}}
	lock.ClaimEach(context.Background(), l, reqs[1:]) // another host claimed b
	for i, r := range lock.ClaimEach(context.Background(), l, reqs) {
		fmt.Println(reqs[i].Key, r.Err == nil, errors.Is(r.Err, lock.ErrNotAcquired))
	}
	// Output:
	// tick/a/100 true false
	// tick/b/100 false true
}

// A Batch is the backend's side of a Keeper: grants renewed together.
func ExampleBatcher() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	b, err := l.NewBatch(context.Background(), 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close(context.Background())
	var hs []lock.Handle
	for _, key := range []string{"a", "b", "c"} {
		h, err := b.TryAcquire(context.Background(), key)
		if err != nil {
			log.Fatal(err)
		}
		hs = append(hs, h)
	}
	_ = hs[1].Release(context.Background())
	for i, err := range b.Renew(context.Background(), hs) {
		fmt.Println(hs[i].Key(), err == nil, errors.Is(err, lock.ErrLost))
	}
	// Output:
	// a true false
	// b false true
	// c true false
}

// Many releases in one call: a round trip per chunk on an EachReleaser
// (memlock, redislock), one Release each otherwise.
func ExampleReleaseEach() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var hs []lock.Handle
	for _, key := range []string{"a", "b", "c"} {
		h, err := l.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		hs = append(hs, h)
	}
	_ = hs[1].Release(ctx) // b is gone already
	for i, err := range lock.ReleaseEach(ctx, l, hs) {
		fmt.Println(hs[i].Key(), err == nil, errors.Is(err, lock.ErrLost))
	}
	// Output:
	// a true false
	// b false true
	// c true false
}

// A wrapper whose Release does more than release the grant it wraps is
// released with the others, then told the outcome.
func ExampleAfterReleaser() {
	l, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	h, err := l.TryAcquire(ctx, "slot/0", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	var held atomic.Int32
	held.Add(1)
	p := &permit{Handle: h, held: &held}
	fmt.Println(lock.ReleaseEach(ctx, l, []lock.Handle{p})[0], held.Load())
	// Output: <nil> 0
}

// permit is a wrapper that counts the grants held (as semaphore.Permit).
type permit struct {
	lock.Handle
	held *atomic.Int32
}

func (p *permit) Unwrap() lock.Handle { return p.Handle }

func (p *permit) Release(ctx context.Context) error {
	return p.AfterRelease(ctx, p.Handle.Release(ctx))
}

func (p *permit) AfterRelease(_ context.Context, err error) error {
	if err == nil {
		p.held.Add(-1)
	}
	return err
}
