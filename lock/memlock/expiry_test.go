package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// TestExpiredEntriesAreSwept: claims of distinct keys (a scheduler's tick
// claims), left to lapse, do not stay in the table: 100,000 claims of a
// second, a thousand a second, leave it at most twice the thousand alive
// at once (and the sweep's floor). Before the sweep, every one of them
// stayed until its key was touched again, which a tick's key never is.
func TestExpiredEntriesAreSwept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l, err := memlock.New()
		if err != nil {
			t.Fatal(err)
		}
		most := 0
		for round := range 100 {
			for i := range 1000 {
				if _, err := l.Claim(ctx, fmt.Sprintf("tick/%d/%d", round, i), time.Second); err != nil {
					t.Fatal(err)
				}
				table, listed := memlock.Entries(l)
				most = max(most, table, listed)
			}
			time.Sleep(time.Second)
		}
		if limit := 2*1000 + memlock.SweepFloor; most > limit {
			t.Fatalf("after 100,000 lapsed claims, 1,000 alive at once: the table reached %d entries; want at most %d", most, limit)
		}
	})
}

// TestSweepKeepsWhatLives: the sweep drops only what expired: a grant
// extended past its first expiry, a released-and-taken-again key, and
// shares stay; an expired share, a writer's mark and an expired grant go,
// and the expired grant's handle reports the loss.
func TestSweepKeepsWhatLives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l, err := memlock.New()
		if err != nil {
			t.Fatal(err)
		}
		kept, err := l.TryAcquire(ctx, "kept", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		gone, err := l.TryAcquire(ctx, "gone", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		again, err := l.TryAcquire(ctx, "again", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if again, err = l.TryAcquire(ctx, "again", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		share, err := l.TryAcquireShared(ctx, "shared", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		longShare, err := l.TryAcquireShared(ctx, "shared/long", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A writer refused because of the long share leaves its mark.
		if _, err := l.TryAcquire(ctx, "shared/long", time.Second); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("writer against a share: %v; want ErrNotAcquired", err)
		}
		time.Sleep(500 * time.Millisecond)
		if err := kept.Extend(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		lost := gone.(lock.LossNotifier).Lost()
		time.Sleep(time.Second) // gone and share expired; kept, again, longShare live
		if _, err := l.TryAcquire(ctx, "other", time.Second); err != nil {
			t.Fatal(err)
		}
		memlock.Sweep(l)
		select {
		case <-lost:
		default:
			t.Fatal("the swept grant's Lost channel is open")
		}
		// kept, again, longShare, the writer's mark (2 s from its refusal:
		// lock.IntentTTL) and other.
		if table, _ := memlock.Entries(l); table != 5 {
			t.Fatalf("%d table entries; want 5 (kept, again, a share, a writer's mark, other)", table)
		}
		for _, h := range []lock.Handle{kept, again, longShare} {
			if err := h.Extend(ctx, time.Second); err != nil {
				t.Fatalf("Extend of %q: %v; the sweep dropped a live grant", h.Key(), err)
			}
		}
		if err := share.Extend(ctx, time.Second); !errors.Is(err, lock.ErrLost) {
			t.Fatalf("Extend of the expired share: %v; want ErrLost", err)
		}
		time.Sleep(lock.IntentTTL) // the mark and everything else expired
		if _, err := l.TryAcquire(ctx, "last", time.Second); err != nil {
			t.Fatal(err)
		}
		memlock.Sweep(l)
		if table, listed := memlock.Entries(l); table != 1 || listed != 1 {
			t.Fatalf("%d table entries, %d listed; want 1 and 1 (last)", table, listed)
		}
	})
}

// An expired grant that List drops (as it drops every expired entry it
// meets) closes its Lost channel, as every other way out of the table
// does: the key may then go to another owner at once. List dropped it
// without, and the first holder, watching Lost, never learned that
// another owner held its key.
func TestListClosesTheLostChannelOfTheExpiredGrantsItDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		a, err := memlock.New()
		if err != nil {
			t.Fatal(err)
		}
		b, err := a.Share()
		if err != nil {
			t.Fatal(err)
		}
		h, err := a.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lost := h.(lock.LossNotifier).Lost()
		time.Sleep(2 * time.Second)
		if _, err := a.List(ctx, ""); err != nil {
			t.Fatal(err)
		}
		h2, err := b.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer h2.Release(ctx)
		select {
		case <-lost:
		default:
			t.Fatal("another owner holds the key after its expiry, and the first handle's Lost channel is open")
		}
	})
}
