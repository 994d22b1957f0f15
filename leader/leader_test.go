package leader_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func TestMain(m *testing.M) {
	childMain()
	testenv.Main(m)
}

// countingLock counts the Extend calls of its handles and can make them fail.
type countingLock struct {
	*memlock.Lock
	extends atomic.Int32
	fail    atomic.Bool
}

func (c *countingLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := c.Lock.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &countingHandle{h, c}, nil
}

type countingHandle struct {
	lock.Handle
	c *countingLock
}

func (h *countingHandle) Extend(ctx context.Context, ttl time.Duration) error {
	h.c.extends.Add(1)
	if h.c.fail.Load() {
		return backendkit.Unavailable("extend", errors.New("network down"))
	}
	return h.Handle.Extend(ctx, ttl)
}

// The leader renews every RenewEvery, and steps down with RenewEvery of the
// lease left when renewals fail.
func TestRenewCadenceAndStepDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &countingLock{Lock: testkit.Must(memlock.New())}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		electedAt := make(chan time.Time, 10)
		stepped := make(chan time.Time, 10)
		go leader.Run(ctx, l, "cadence", func(ctx context.Context) error {
			electedAt <- time.Now()
			<-ctx.Done()
			stepped <- time.Now()
			return nil
		}, leader.WithTTL(15*time.Second), leader.WithRenewInterval(5*time.Second))
		elected := <-electedAt
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if n := l.extends.Load(); n != 6 {
			t.Fatalf("%d renewals in 31 s at one per 5 s, want 6", n)
		}
		l.fail.Store(true) // the last good renewal was at 30 s: valid until 45 s
		got := <-stepped
		if at := got.Sub(elected); at != 40*time.Second {
			t.Fatalf("stepped down %v after election, want 40 s (5 s before the lease ends at 45 s)", at)
		}
	})
}

// A crashed leader's lease runs out and a follower takes over at once; a
// resigning leader hands over at the instant it releases.
func TestFailoverTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := testkit.Must(memlock.New())
		opts := []leader.Option{leader.WithTTL(3 * time.Second), leader.WithRenewInterval(time.Second), leader.WithRetryInterval(2 * time.Second)}
		// A "crashed" leader: a grant nobody renews.
		if _, err := table.TryAcquire(t.Context(), leader.Key("failover"), 3*time.Second); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		elected := make(chan time.Time, 2)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		follower := func(l lock.Lock) {
			_ = leader.Run(ctx, l, "failover", func(ctx context.Context) error {
				elected <- time.Now()
				<-ctx.Done()
				return nil
			}, opts...)
		}
		aCtx, stopA := context.WithCancel(ctx)
		go func() {
			_ = leader.Run(aCtx, testkit.Must(table.Share()), "failover", func(ctx context.Context) error {
				elected <- time.Now()
				<-ctx.Done()
				return nil
			}, opts...)
		}()
		first := <-elected
		if d := first.Sub(start); d < 3*time.Second || d > 3*time.Second+25*time.Millisecond {
			t.Fatalf("takeover %v after a crash with a 3 s lease", d)
		}
		go follower(testkit.Must(table.Share()))
		time.Sleep(10 * time.Second) // the follower waits, the leader renews
		synctest.Wait()
		resigned := time.Now()
		stopA() // graceful resign
		if second := <-elected; !second.Equal(resigned) {
			t.Fatalf("the follower took over %v after the resign, want at once", second.Sub(resigned))
		}
	})
}

func TestBadInput(t *testing.T) {
	l := testkit.Must(memlock.New())
	fn := func(context.Context) error { return nil }
	var nilCtx context.Context
	for name, err := range map[string]error{
		"nil lock":        leader.Run(t.Context(), nil, "x", fn),
		"nil fn":          leader.Run(t.Context(), l, "x", nil),
		"nil ctx":         leader.Run(nilCtx, l, "x", fn),
		"empty name":      leader.Run(t.Context(), l, "", fn),
		"renew too slow":  leader.Run(t.Context(), l, "x", fn, leader.WithTTL(time.Second), leader.WithRenewInterval(500*time.Millisecond)),
		"zero lease":      leader.Run(t.Context(), l, "x", fn, leader.WithTTL(0)),
		"negative retry":  leader.Run(t.Context(), l, "x", fn, leader.WithRetryInterval(-1)),
		"nil option":      leader.Run(t.Context(), l, "x", fn, nil),
		"observe no name": func() error { _, _, err := leader.Observe(t.Context(), l, ""); return err }(),
	} {
		if !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestSuite runs the shared leader suite on every backend.
func TestSuite(t *testing.T) {
	backends.Each(t, backends.All(t), func(t *testing.T, b backends.Backend) {
		t.Run("OneLeader", func(t *testing.T) { t.Parallel(); testOneLeader(t, b) })
		t.Run("GracefulResign", func(t *testing.T) { t.Parallel(); testResign(t, b) })
		t.Run("Observe", func(t *testing.T) { t.Parallel(); testObserve(t, b) })
		t.Run("FnErrorEndsTheTerm", func(t *testing.T) { t.Parallel(); testFnError(t, b) })
	})
}

var quick = []leader.Option{leader.WithTTL(3 * time.Second), leader.WithRenewInterval(time.Second), leader.WithRetryInterval(500 * time.Millisecond)}

// Three candidates: one leads at a time, terms grow, each term's writes are
// fenced; when the leader resigns another takes over.
func testOneLeader(t *testing.T, b backends.Backend) {
	name := "one-" + t.Name()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var (
		leading atomic.Int32
		mu      sync.Mutex
		fence   lock.Fence
		terms   []uint64
		wg      sync.WaitGroup
	)
	for range 3 {
		l := b.New(t)
		wg.Go(func() {
			_ = leader.Run(ctx, l, name, func(ctx context.Context) error {
				if n := leading.Add(1); n != 1 {
					t.Errorf("%d leaders at once", n)
				}
				term, _ := lock.TokenFrom(ctx)
				mu.Lock()
				terms = append(terms, term)
				n := len(terms)
				mu.Unlock()
				if err := fence.Do(term, nil); err != nil {
					t.Errorf("term %d: %v", term, err)
				}
				time.Sleep(50 * time.Millisecond) // work
				leading.Add(-1)
				if n >= 6 {
					cancel()
				}
				return nil // end the term: the next one is someone's
			}, quick...)
		})
	}
	wg.Wait()
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			t.Fatalf("terms not increasing: %v", terms)
		}
	}
	if len(terms) < 6 {
		t.Fatalf("only %d terms", len(terms))
	}
}

// testResign: a follower whose attempt was refused is waiting when the
// leader resigns, and takes over within 1 s. The lease and the follower's
// retry interval are 30 s and a minute: only the release notification can
// hand over this fast.
func testResign(t *testing.T, b backends.Backend) {
	name := "resign-" + t.Name()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	aCtx, stopA := context.WithCancel(ctx)
	elected := make(chan string, 2)
	run := func(ctx context.Context, l lock.Lock, who string, opts ...leader.Option) {
		_ = leader.Run(ctx, l, name, func(ctx context.Context) error {
			elected <- who
			<-ctx.Done()
			return nil
		}, append(append(quick, leader.WithTTL(30*time.Second)), opts...)...)
	}
	go run(aCtx, b.New(t), "a")
	if who := <-elected; who != "a" {
		t.Fatalf("%s elected first", who)
	}
	probe := backends.NewProbe(t, b.New(t))
	go run(ctx, probe, "b", leader.WithRetryInterval(time.Minute))
	probe.WaitRejected(t, 10*time.Second) // b campaigned and lost: it now waits
	stopA()
	resigned := time.Now()
	select {
	case who := <-elected:
		if who != "b" {
			t.Fatalf("%s elected after a resigned", who)
		}
		if d := time.Since(resigned); d > time.Second {
			t.Fatalf("took over %v after a graceful resign, want within 1 s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no takeover within 5 s of a graceful resign")
	}
}

func testObserve(t *testing.T, b backends.Backend) {
	name := "observe-" + t.Name()
	l := b.New(t)
	if _, ok := l.(lock.Inspector); !ok {
		t.Skip("no Inspector")
	}
	observer := b.New(t)
	if _, ok, err := leader.Observe(t.Context(), observer, name); err != nil || ok {
		t.Fatalf("Observe before any election: %v %v", ok, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan leader.Term, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = leader.Run(ctx, l, name, func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		}, append(quick, leader.OnElected(func(term leader.Term) { got <- term }))...)
	}()
	term := <-got
	seen, ok, err := leader.Observe(t.Context(), observer, name)
	if err != nil || !ok {
		t.Fatalf("Observe: %v %v", ok, err)
	}
	if seen.Term != term.Term || seen.Owner != term.Owner || seen.Owner == "" {
		t.Fatalf("Observe = %+v, the leader says %+v", seen, term)
	}
	if seen.Since.IsZero() || seen.Since.Sub(term.Since).Abs() > time.Second {
		t.Fatalf("Since %v, elected at %v", seen.Since, term.Since)
	}
	all, err := leader.ObserveAll(t.Context(), observer, name)
	if err != nil || len(all) != 1 || all[0].Name != name || all[0].Term != seen {
		t.Fatalf("ObserveAll = %+v, %v; want %q led by %+v", all, err, name, seen)
	}
	cancel()
	<-done
	if _, ok, _ := leader.Observe(t.Context(), observer, name); ok {
		t.Fatal("a leader is still observed after the resign")
	}
}

func testFnError(t *testing.T, b backends.Backend) {
	name := "fnerr-" + t.Name()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	boom := errors.New("boom")
	var terms atomic.Int32
	causes := make(chan error, 4)
	_ = leader.Run(ctx, b.New(t), name, func(ctx context.Context) error {
		if terms.Add(1) == 2 {
			cancel()
		}
		return boom
	}, append(quick, leader.OnDemoted(func(_ leader.Term, cause error) { causes <- cause }))...)
	if n := terms.Load(); n != 2 {
		t.Fatalf("%d terms, want 2: an fn error ends the term and Run campaigns again", n)
	}
	if c := <-causes; !errors.Is(c, boom) {
		t.Fatalf("OnDemoted cause %v, want fn's error", c)
	}
}

// A candidate whose OnElected is slow (registering in service discovery:
// 4 s against a 3 s ttl) keeps its peers out while it runs, and its fn
// then starts on a live term. OnElected ran before the lease was kept: the
// grant ran out under it, a peer was elected while the first candidate
// still announced its term, and then the first candidate's fn started all
// the same, with a live context: two leaders at once.
func TestSlowOnElectedKeepsPeersOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := testkit.Must(memlock.New())
		opts := []leader.Option{leader.WithTTL(3 * time.Second), leader.WithRenewInterval(time.Second), leader.WithRetryInterval(2 * time.Second)}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var slowLive, peerRuns atomic.Int32
		// lead counts the terms that start live, and leads until shutdown.
		lead := func(live *atomic.Int32) func(context.Context) error {
			return func(ctx context.Context) error {
				if ctx.Err() == nil {
					live.Add(1)
				}
				<-ctx.Done()
				return nil
			}
		}
		slowElected := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			_ = leader.Run(ctx, testkit.Must(table.Share()), "slow-elected", lead(&slowLive), append(opts, leader.OnElected(func(leader.Term) {
				close(slowElected)
				time.Sleep(4 * time.Second)
			}))...)
		})
		<-slowElected
		wg.Go(func() { _ = leader.Run(ctx, testkit.Must(table.Share()), "slow-elected", lead(&peerRuns), opts...) })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		peer, slow := peerRuns.Load(), slowLive.Load()
		cancel()
		wg.Wait()
		if peer != 0 || slow != 1 {
			t.Fatalf("in 10 s the peer led %d time(s), the slow candidate's fn started live %d time(s); want 0 and 1", peer, slow)
		}
	})
}

// An OnElected that takes 2.5 s of a 3 s ttl leaves a healthy leader in
// place: its lease is renewed while OnElected runs. It was not: the term
// ended (lock.ErrLost) as soon as fn started, though nothing had failed.
func TestSlowOnElectedDoesNotDemoteAHealthyLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx, cancel := context.WithCancel(t.Context())
		causes := make(chan error, 10)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = leader.Run(ctx, l, "slow-elected", func(ctx context.Context) error {
				<-ctx.Done()
				return nil
			}, leader.WithTTL(3*time.Second), leader.WithRenewInterval(time.Second), leader.WithRetryInterval(2*time.Second),
				leader.OnElected(func(leader.Term) { time.Sleep(2500 * time.Millisecond) }),
				leader.OnDemoted(func(_ leader.Term, cause error) { causes <- cause }))
		}()
		time.Sleep(10 * time.Second)
		cancel()
		<-done
		if c := <-causes; !errors.Is(c, context.Canceled) || len(causes) > 0 {
			t.Fatalf("the term ended with %v (and %d more terms), want one term that ends at shutdown", c, len(causes))
		}
	})
}

// A term whose grant is lost while OnElected runs ends without fn: fn
// must not start on a grant that is gone. fn started (and with a live
// context, the loss not yet seen).
func TestTermLostDuringOnElectedSkipsFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var runs atomic.Int32
		type ended struct {
			cause error
			runs  int32 // fn's runs when the first term ended
		}
		first := make(chan ended, 1)
		var once sync.Once
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = leader.Run(ctx, l, "lost-elected", func(ctx context.Context) error {
				runs.Add(1)
				<-ctx.Done()
				return nil
			}, leader.WithTTL(3*time.Second), leader.WithRenewInterval(time.Second), leader.WithRetryInterval(2*time.Second),
				leader.OnElected(func(leader.Term) {
					once.Do(func() {
						// The grant is taken away (an operator, a backend
						// that lost it) while OnElected works.
						if ok, err := l.ForceRelease(context.Background(), leader.Key("lost-elected")); !ok || err != nil {
							t.Errorf("ForceRelease: %v, %v", ok, err)
						}
						time.Sleep(500 * time.Millisecond)
					})
				}),
				leader.OnDemoted(func(_ leader.Term, cause error) {
					select {
					case first <- ended{cause, runs.Load()}:
					default:
					}
				}))
		}()
		e := <-first
		cancel()
		<-done
		if e.runs != 0 || !errors.Is(e.cause, lock.ErrLost) {
			t.Fatalf("fn ran %d time(s) in a term lost during OnElected, which ended with %v; want no run and lock.ErrLost", e.runs, e.cause)
		}
	})
}

// A leader whose fn panics, and whose caller recovers (a supervisor that
// restarts work), hands leadership over: the panic releases the grant on
// its way out of Run. It did not: the renewal went on for ever, and no
// one else was ever elected, though the leader's Run had ended.
func TestRunThatPanicsHandsLeadershipOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		table := testkit.Must(memlock.New())
		opts := []leader.Option{leader.WithTTL(3 * time.Second), leader.WithRenewInterval(time.Second), leader.WithRetryInterval(2 * time.Second)}
		var panicked any
		aDone := make(chan struct{})
		go func() {
			defer close(aDone)
			defer func() { panicked = recover() }()
			_ = leader.Run(t.Context(), testkit.Must(table.Share()), "panic", func(ctx context.Context) error {
				panic("bug in the work")
			}, opts...)
		}()
		<-aDone
		if panicked != "bug in the work" {
			t.Errorf("Run's panic: %v, want fn's", panicked)
		}
		ctx, cancel := context.WithCancel(t.Context())
		elected := make(chan struct{}, 1)
		bDone := make(chan struct{})
		go func() {
			defer close(bDone)
			_ = leader.Run(ctx, testkit.Must(table.Share()), "panic", func(ctx context.Context) error {
				elected <- struct{}{}
				<-ctx.Done()
				return nil
			}, opts...)
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case <-elected:
		default:
			t.Errorf("no one was elected in a minute (ttl 3 s) after the leader's Run ended with a panic")
			// End the leaked renewal, so that the bubble can end.
			_, _ = table.ForceRelease(context.Background(), leader.Key("panic"))
		}
		cancel()
		<-bDone
	})
}
