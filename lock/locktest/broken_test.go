package locktest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// The suite must be able to fail. Each broken backend below breaks one
// promise; TestSuiteCatchesBrokenBackends runs the suite against it in a
// child process and checks that the subtests guarding that promise fail.

const brokenEnv = "LOCKTEST_BROKEN"

var brokenBackends = map[string]struct {
	wrap     func(*memlock.Lock) lock.Lock
	mustFail []string // subtests that must report the breakage
	mustSay  []string // and what they must say, somewhere in the output
	batch    bool     // run RunBatch rather than Run
}{
	// One lost grant makes Renew report every grant of the call lost.
	"batch-loses-all": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &batchLosesAll{l} },
		mustFail: []string{"OneLostAlone", "Keeper"},
		mustSay:  []string{"beside the force-released one"},
		batch:    true,
	},
	// Renew answers nil and renews nothing.
	"batch-renews-nothing": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &batchRenewsNothing{l} },
		mustFail: []string{"Keeper"},
		mustSay:  []string{"lost while renewals succeed"},
		batch:    true,
	},
	// Release of a lost grant deletes whoever holds the key now.
	"release-ignores-ownership": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &ignoresOwnership{l} },
		mustFail: []string{"ExpiryAndOwnership"},
	},
	// Tokens repeat: every grant of a key reuses the first token.
	"tokens-repeat": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &repeatsTokens{l} },
		mustFail: []string{"Basics", "Contention"},
	},
	// Every other busy attempt is granted anyway. Besides the occupancy
	// counter, the fenced resource must see it: the second grant's token is
	// newer, and when it writes first the older holder's write is stale.
	"grants-twice": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &grantsTwice{Lock: l} },
		mustFail: []string{"Basics", "Contention"},
		mustSay:  []string{"grant safety violated", "stale writes"},
	},
	// A ttl above the maximum overflows as redislock's did: TryAcquire
	// reports the backend unavailable, Extend deletes the grant and
	// reports success.
	"ttl-overflows": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &overflowsTTL{l} },
		mustFail: []string{"MaxTTL"},
		mustSay:  []string{"want ErrInvalidTTL", "after Extend"},
	},
	// More keys than the server takes in one call fail as unavailable
	// (as etcd's --max-txn-ops and Lua's unpack limit did), well below
	// the MaxKeys the backend states.
	"keys-fail-unavailable": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &fewKeysUnavailable{l} },
		mustFail: []string{"MaxKeys"},
		mustSay:  []string{"TryAcquireAny with MaxKeys"},
	},
	// A share is granted beside an exclusive grant (a script that checks
	// the writer's intent but not the writer).
	"shares-ignore-exclusive": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &sharesIgnoreExclusive{l} },
		mustFail: []string{"Shared/Basics", "Shared/Exclusion"},
		mustSay:  []string{"shared grant safety violated"},
	},
	// A refused writer never marks the key as wanted, and waits without a
	// queue: readers that come back to back starve it.
	"writer-intent-never-set": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &noWriterIntent{l} },
		mustFail: []string{"Shared/Intent", "Shared/WriterNotStarved"},
		mustSay:  []string{"a writer was starved by continuous readers"},
	},
	// Shares draw their tokens from a counter of their own, above the
	// exclusive grants': a writer's token is below earlier readers'.
	"share-tokens-apart": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &shareTokensApart{l} },
		mustFail: []string{"Shared/Tokens"},
	},
	// TryAcquireAll takes the free keys of a set one by one and, at the
	// first held key, reports the conflict and keeps what it took.
	"all-of-partial": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &partialGroups{l} },
		mustFail: []string{"Group/NoPartial"},
		mustSay:  []string{"left a partial grant"},
	},
	// A refused TryAcquireAll reports the shortest remaining ttl of the
	// held keys, not the longest: AcquireAll then retries too early.
	"all-of-shortest-remaining": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &shortestRemaining{l} },
		mustFail: []string{"Group/Conflict"},
		mustSay:  []string{"want the longest held key's"},
	},
	// Every failed attempt leaves a goroutine behind.
	"leaks-goroutines": {
		wrap:     func(l *memlock.Lock) lock.Lock { return &leaksGoroutines{l} },
		mustFail: []string{"CancelStorm"},
		mustSay:  []string{"goroutines leaked by cancelled acquires", "broken_test.go"},
	},
}

// TestBrokenBackendChild is the child side: it runs the suite against the
// broken backend named in LOCKTEST_BROKEN, and does nothing otherwise.
func TestBrokenBackendChild(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		return
	}
	b := brokenBackends[name]
	shared := testkit.Must(memlock.New())
	newLock := func(testing.TB) lock.Lock { return b.wrap(testkit.Must(shared.Share())) }
	if b.batch {
		locktest.RunBatch(t, newLock)
		return
	}
	locktest.Run(t, newLock)
}

func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		return
	}
	for name, b := range brokenBackends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenBackendChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed (or did not run) against a backend that %s: %v\n%s", name, err, out)
			}
			t.Logf("failed subtests: %s", strings.Join(failedSubtests(string(out)), ", "))
			for _, sub := range b.mustFail {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenBackendChild/"+sub+" ") {
					t.Errorf("subtest %s did not report the breakage %q; output:\n%s", sub, name, out)
				}
			}
			for _, msg := range b.mustSay {
				if !strings.Contains(string(out), msg) {
					t.Errorf("the suite did not say %q about the breakage %q; output:\n%s", msg, name, out)
				}
			}
		})
	}
}

// The broken backends wrap memlock, which is a lock.Queue: lock.Acquire
// then waits in AcquireQueued, not by retrying TryAcquire. A breakage of
// the grants is therefore made on both ways in, as a backend with the bug
// in its grant would have it on both.

type ignoresOwnership struct{ *memlock.Lock }

func (l *ignoresOwnership) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := l.Lock.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &forcefulRelease{h, l.Lock}, nil
}

func (l *ignoresOwnership) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := l.Lock.AcquireQueued(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &forcefulRelease{h, l.Lock}, nil
}

type forcefulRelease struct {
	lock.Handle
	l *memlock.Lock
}

func (h *forcefulRelease) Release(ctx context.Context) error {
	if err := h.Handle.Release(ctx); errors.Is(err, lock.ErrLost) {
		_, _ = h.l.ForceRelease(ctx, h.Key()) // the bug: deletes the successor's grant
	}
	return nil
}

type leaksGoroutines struct{ *memlock.Lock }

func (l *leaksGoroutines) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := l.Lock.TryAcquire(ctx, key, ttl)
	if err != nil {
		go func() { select {} }() // the bug: waits for nothing, forever
	}
	return h, err
}

func (l *leaksGoroutines) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := l.Lock.AcquireQueued(ctx, key, ttl)
	if err != nil {
		go func() { select {} }()
	}
	return h, err
}

type repeatsTokens struct{ *memlock.Lock }

var firstTokens sync.Map // key -> the first token granted for it

func (l *repeatsTokens) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return repeatToken(l.Lock.TryAcquire(ctx, key, ttl))
}

func (l *repeatsTokens) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return repeatToken(l.Lock.AcquireQueued(ctx, key, ttl))
}

func repeatToken(h lock.Handle, err error) (lock.Handle, error) {
	if err != nil {
		return nil, err
	}
	first, _ := firstTokens.LoadOrStore(h.Key(), h.Token())
	return &fixedToken{h, first.(uint64)}, nil
}

type fixedToken struct {
	lock.Handle
	token uint64
}

func (h *fixedToken) Token() uint64 { return h.token }

type grantsTwice struct {
	*memlock.Lock
	n atomic.Int64
}

func (l *grantsTwice) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := l.Lock.TryAcquire(ctx, key, ttl)
	if errors.Is(err, lock.ErrNotAcquired) && l.n.Add(1)%2 == 1 {
		// The bug: a second grant, with a fresh token from a shadow key.
		shadow, serr := l.Lock.TryAcquire(ctx, key+"#shadow"+time.Now().String(), ttl)
		if serr == nil {
			return &renamed{shadow, key}, nil
		}
	}
	return h, err
}

// AcquireQueued takes the broken TryAcquire's second grant when it makes
// one, and waits in the queue otherwise.
func (l *grantsTwice) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if h, err := l.TryAcquire(ctx, key, ttl); !errors.Is(err, lock.ErrNotAcquired) {
		return h, err
	}
	return l.Lock.AcquireQueued(ctx, key, ttl)
}

type renamed struct {
	lock.Handle
	key string
}

func (h *renamed) Key() string { return h.key }

func failedSubtests(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(line, "--- FAIL: TestBrokenBackendChild/"); ok {
			names = append(names, strings.Fields(rest)[0])
		}
	}
	return names
}

type overflowsTTL struct{ *memlock.Lock }

func (l *overflowsTTL) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if ttl > lock.MaxTTL { // the bug: the server refuses the overflowed expiry
		return nil, backendkit.Unavailable("acquire", errors.New("ERR invalid expire time in 'set' command"))
	}
	h, err := l.Lock.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &overflowingExtend{h, l.Lock}, nil
}

func (l *overflowsTTL) AcquireQueued(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if ttl > lock.MaxTTL {
		return nil, backendkit.Unavailable("acquire", errors.New("ERR invalid expire time in 'set' command"))
	}
	h, err := l.Lock.AcquireQueued(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &overflowingExtend{h, l.Lock}, nil
}

type overflowingExtend struct {
	lock.Handle
	l *memlock.Lock
}

func (h *overflowingExtend) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl > lock.MaxTTL { // the bug: a negative expiry deletes the grant
		_, _ = h.l.ForceRelease(ctx, h.Key())
		return nil
	}
	return h.Handle.Extend(ctx, ttl)
}

type fewKeysUnavailable struct{ *memlock.Lock }

func (l *fewKeysUnavailable) TryAcquireAny(ctx context.Context, keys []string, ttl time.Duration) (lock.Handle, error) {
	if len(keys) > 64 { // the bug: the server refuses the call
		return nil, backendkit.Unavailable("acquire", errors.New("too many operations in txn request"))
	}
	return l.Lock.TryAcquireAny(ctx, keys, ttl)
}

// sharesIgnoreExclusive grants a share refused because of an exclusive
// grant anyway, with a fresh token from a shadow key.
type sharesIgnoreExclusive struct{ *memlock.Lock }

func (l *sharesIgnoreExclusive) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := l.Lock.TryAcquireShared(ctx, key, ttl)
	if g, held, _ := l.Inspect(ctx, key); errors.Is(err, lock.ErrNotAcquired) && held && !g.Shared {
		shadow, serr := l.Lock.TryAcquireShared(ctx, key+"#shadow"+time.Now().String(), ttl)
		if serr == nil {
			return &renamed{shadow, key}, nil // the bug
		}
	}
	return h, err
}

// noWriterIntent hides memlock's queue and all-of grants, and refuses an
// exclusive attempt on a key with shares without asking memlock, so that
// no intent is ever marked.
type noWriterIntent struct{ m *memlock.Lock }

func (l *noWriterIntent) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if g, held, err := l.m.Inspect(ctx, key); err == nil && held && g.Shared {
		return nil, backendkit.NotAcquired(key, g.Remaining) // the bug: no mark
	}
	return l.m.TryAcquire(ctx, key, ttl)
}

func (l *noWriterIntent) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	return l.m.TryAcquireShared(ctx, key, ttl)
}

func (l *noWriterIntent) Subscribe(ctx context.Context, keys ...string) (lock.Subscription, error) {
	return l.m.Subscribe(ctx, keys...)
}

func (l *noWriterIntent) Owner() string { return l.m.Owner() }

// shareTokensApart adds 1<<40 to every share's token.
type shareTokensApart struct{ *memlock.Lock }

func (l *shareTokensApart) TryAcquireShared(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := l.Lock.TryAcquireShared(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return &fixedToken{h, h.Token() + 1<<40}, nil
}

// partialGroups takes a set's keys one by one and keeps them on conflict.
type partialGroups struct{ *memlock.Lock }

func (l *partialGroups) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (lock.Group, error) {
	if err := backendkit.ValidateGroup(ctx, keys, ttl, lock.DefaultLimits); err != nil {
		return nil, err
	}
	g := &handleGroup{keys: keys}
	for _, k := range keys {
		h, err := l.TryAcquire(ctx, k, ttl)
		if err != nil {
			return nil, err // the bug: what was taken stays taken
		}
		g.hs = append(g.hs, h)
	}
	return g, nil
}

type handleGroup struct {
	keys []string
	hs   []lock.Handle
}

func (g *handleGroup) Keys() []string        { return g.keys }
func (g *handleGroup) ValidUntil() time.Time { return g.hs[0].ValidUntil() }

func (g *handleGroup) Tokens() []uint64 {
	var t []uint64
	for _, h := range g.hs {
		t = append(t, h.Token())
	}
	return t
}

func (g *handleGroup) Extend(ctx context.Context, ttl time.Duration) error {
	var errs []error
	for _, h := range g.hs {
		errs = append(errs, h.Extend(ctx, ttl))
	}
	return errors.Join(errs...)
}

func (g *handleGroup) Release(ctx context.Context) error {
	var errs []error
	for _, h := range g.hs {
		errs = append(errs, h.Release(ctx))
	}
	return errors.Join(errs...)
}

// shortestRemaining reports the held key that frees first.
type shortestRemaining struct{ *memlock.Lock }

func (l *shortestRemaining) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration) (lock.Group, error) {
	g, err := l.Lock.TryAcquireAll(ctx, keys, ttl)
	if !errors.Is(err, lock.ErrNotAcquired) {
		return g, err
	}
	var first *lock.NotAcquiredError
	for _, k := range keys {
		if h, held, _ := l.Inspect(ctx, k); held && (first == nil || h.Remaining < first.Remaining) {
			first = &lock.NotAcquiredError{Key: k, Remaining: h.Remaining} // the bug
		}
	}
	if first == nil {
		return nil, err
	}
	return nil, first
}

// batchLosesAll's batches report every grant of a Renew lost when one is.
type batchLosesAll struct{ *memlock.Lock }

func (l *batchLosesAll) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	b, err := l.Lock.NewBatch(ctx, ttl)
	return &losesAll{b}, err
}

type losesAll struct{ lock.Batch }

func (b *losesAll) Renew(ctx context.Context, hs []lock.Handle) []error {
	errs := b.Batch.Renew(ctx, hs)
	for _, err := range errs {
		if errors.Is(err, lock.ErrLost) {
			for i := range errs {
				errs[i] = err
			}
			break
		}
	}
	return errs
}

// batchRenewsNothing's batches answer every Renew with success and renew
// nothing.
type batchRenewsNothing struct{ *memlock.Lock }

func (l *batchRenewsNothing) NewBatch(ctx context.Context, ttl time.Duration) (lock.Batch, error) {
	b, err := l.Lock.NewBatch(ctx, ttl)
	return &renewsNothing{b}, err
}

type renewsNothing struct{ lock.Batch }

func (b *renewsNothing) Renew(_ context.Context, hs []lock.Handle) []error {
	return make([]error, len(hs))
}
