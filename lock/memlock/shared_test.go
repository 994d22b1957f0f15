package memlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// A writer in the queue refuses new shares; the last share's release
// hands it the key at once; an expiring share hands it over at its expiry.
func TestQueuedWriterAndShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx := t.Context()
		r1, _ := l.TryAcquireShared(ctx, "k", time.Hour)
		_, _ = l.TryAcquireShared(ctx, "k", 10*time.Second) // abandoned
		got := make(chan time.Time, 1)
		go func() {
			if _, err := testkit.Must(l.Share()).AcquireQueued(ctx, "k", time.Minute); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		synctest.Wait()
		time.Sleep(5 * time.Second) // past the writer's intent: the queue alone refuses
		_, err := l.TryAcquireShared(ctx, "k", time.Minute)
		if !errors.Is(err, lock.ErrNotAcquired) || lock.RemainingTTL(err) != time.Hour-5*time.Second {
			t.Fatalf("a share while a writer is queued: %v, want ErrNotAcquired with the last share's remaining ttl", err)
		}
		released := time.Now()
		_ = r1.Release(ctx)
		select {
		case <-got:
			t.Fatalf("the writer was granted beside the abandoned share")
		default:
		}
		if at := <-got; at.Sub(released) != 5*time.Second {
			t.Fatalf("the writer was granted %v after the release, want at the abandoned share's expiry (5s)", at.Sub(released))
		}
	})
}

func TestQueuedWriterGetsTheLastSharesRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx := t.Context()
		r, _ := l.TryAcquireShared(ctx, "k", time.Hour)
		got := make(chan lock.Handle, 1)
		go func() {
			h, _ := testkit.Must(l.Share()).AcquireQueued(ctx, "k", time.Minute)
			got <- h
		}()
		synctest.Wait()
		_ = r.Release(ctx)
		synctest.Wait()
		select {
		case h := <-got:
			if h.Token() <= r.Token() {
				t.Fatalf("writer's token %d after the share's %d", h.Token(), r.Token())
			}
		default:
			t.Fatalf("the last share's release did not hand the key to the queued writer")
		}
	})
}

func TestForceReleaseRemovesEveryShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		ctx := t.Context()
		r1, _ := l.TryAcquireShared(ctx, "k", time.Hour)
		r2, _ := l.TryAcquireShared(ctx, "k", time.Hour)
		lost := r1.(lock.LossNotifier).Lost()
		if ok, err := l.ForceRelease(ctx, "k"); !ok || err != nil {
			t.Fatalf("ForceRelease = %v, %v", ok, err)
		}
		select {
		case <-lost:
		default:
			t.Fatalf("a forced-out share's Lost channel is open")
		}
		if err := r2.Extend(ctx, time.Hour); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Extend of a forced-out share: %v", err)
		}
		h, err := l.TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire after ForceRelease: %v", err)
		}
		_ = h.Release(ctx)
	})
}

func TestInspectReportsSharesAndGroups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New(memlock.WithCommon(lock.Common{Owner: "a"})))
		b := testkit.Must(l.Share(memlock.WithCommon(lock.Common{Owner: "b"})))
		ctx := t.Context()
		_, _ = l.TryAcquireShared(ctx, "s", time.Hour)
		_, _ = b.TryAcquireShared(ctx, "s", time.Minute)
		g, _ := b.TryAcquireAll(ctx, []string{"g/2", "g/1"}, time.Minute)
		got, _, _ := l.Inspect(ctx, "s")
		if !got.Shared || got.Owner != "b" || got.Remaining != time.Minute {
			t.Fatalf("Inspect of a shared key = %+v, want b's share, the one expiring first", got)
		}
		list, _ := l.List(ctx, "")
		if len(list) != 4 {
			t.Fatalf("List = %+v, want 4 grants", list)
		}
		if list[0].Key != "g/1" || list[1].Key != "g/2" || list[0].Group == "" || list[0].Group != list[1].Group || list[0].Shared {
			t.Fatalf("List's group grants = %+v, %+v; want g/1 and g/2 with one group id", list[0], list[1])
		}
		if list[2].Key != "s" || list[3].Key != "s" || !list[2].Shared || !list[3].Shared || list[2].Token >= list[3].Token || list[2].Group != "" {
			t.Fatalf("List's shares = %+v, %+v; want two shares of s in token order", list[2], list[3])
		}
		_ = g.Release(ctx)
		time.Sleep(time.Minute) // b's share expires
		list, _ = l.List(ctx, "")
		if len(list) != 1 || list[0].Owner != "a" {
			t.Fatalf("List after b's grants ended = %+v, want a's share alone", list)
		}
	})
}

// A group one of whose keys was taken over: Extend reports the loss and
// renews nothing; Release reports it and frees the keys still held.
func TestGroupWithALostKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := testkit.Must(memlock.New())
		other := testkit.Must(l.Share())
		ctx := t.Context()
		g, _ := l.TryAcquireAll(ctx, []string{"a", "b"}, time.Minute)
		_, _ = l.ForceRelease(ctx, "b")
		hb, _ := other.TryAcquire(ctx, "b", time.Hour)
		if err := g.Extend(ctx, time.Hour); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Extend of a group with a lost key: %v", err)
		}
		if vu := g.ValidUntil(); !vu.Equal(time.Now().Add(time.Minute)) {
			t.Fatalf("a failed Extend moved ValidUntil to %v", vu)
		}
		if err := g.Release(ctx); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Release of a group with a lost key: %v", err)
		}
		if err := hb.Extend(ctx, time.Hour); err != nil {
			t.Fatalf("the successor of the lost key after the group's Release: %v", err)
		}
		h, err := other.TryAcquire(ctx, "a", time.Minute)
		if err != nil {
			t.Fatalf("the group's other key after its Release: %v", err)
		}
		_ = h.Release(context.Background())
	})
}

// The release of the last live share frees the key, though an expired
// share no one touched since is still recorded: its subscribers are woken
// and a queued writer is handed it at once. The release counted the
// recorded shares, found one, and woke no one: the subscriber slept until
// its hint (10 s), AcquireAll until its next attempt (400 ms).
func TestReleaseOfTheLastLiveShareWakesTheKeysWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := testkit.Must(memlock.New())
		if _, err := l.TryAcquireShared(ctx, "k", time.Second); err != nil { // lapses
			t.Fatal(err)
		}
		last, err := l.TryAcquireShared(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the first share has expired, still recorded
		sub, err := l.Subscribe(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if err := last.Release(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := sub.Wait(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited > 0 {
			t.Fatalf("the subscriber was woken %v after the release of the last live share", waited)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := testkit.Must(memlock.New())
		if _, err := l.TryAcquireShared(ctx, "k", 1500*time.Millisecond); err != nil { // lapses between the writer's attempts
			t.Fatal(err)
		}
		last, err := l.TryAcquireShared(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			g, err := lock.AcquireAll(ctx, l, []string{"k"}, time.Minute)
			if err != nil {
				t.Error(err)
				got <- time.Time{}
				return
			}
			got <- time.Now()
			_ = g.Release(ctx)
		}()
		time.Sleep(1600 * time.Millisecond)
		released := time.Now()
		if err := last.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if at := <-got; at.Sub(released) != 0 {
			t.Fatalf("AcquireAll got the key %v after the release of the last live share", at.Sub(released))
		}
	})
}
