package leader_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// Many elections in one process, each term's grant a lease of one Keeper:
// every term lasts past many ttls, and a term whose grant is taken away
// ends alone.
func TestWithKeeperRunsManyElectionsOnOneKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(m, 3*time.Second))
		defer k.Close(context.Background())
		ctx, cancel := context.WithCancel(t.Context())
		const shards = 10
		ended := make(chan string, shards)
		for i := range shards {
			name := fmt.Sprintf("shard-%d", i)
			go func() {
				err := leader.Run(ctx, m, name, func(ctx context.Context) error {
					<-ctx.Done()
					ended <- fmt.Sprintf("%s: %v", name, context.Cause(ctx))
					return nil
				}, leader.WithKeeper(k))
				if err != nil {
					t.Error(err)
				}
			}()
		}
		time.Sleep(30 * time.Second) // ten ttls
		synctest.Wait()
		if k.Len() != shards {
			t.Fatalf("the Keeper holds %d terms, want %d", k.Len(), shards)
		}
		select {
		case e := <-ended:
			t.Fatalf("a term ended while the Keeper renews: %s", e)
		default:
		}
		if ok, _ := m.ForceRelease(t.Context(), leader.Key("shard-3")); !ok {
			t.Fatal("ForceRelease found no term")
		}
		time.Sleep(time.Second + time.Millisecond) // one renewal round
		synctest.Wait()
		select {
		case e := <-ended:
			if want := "shard-3: "; len(e) < len(want) || e[:len(want)] != want {
				t.Fatalf("ended: %s, want shard-3", e)
			}
		default:
			t.Fatal("the taken-over term did not end within a renewal round")
		}
		select {
		case e := <-ended:
			t.Fatalf("another term ended with it: %s", e)
		default:
		}
		cancel()
	})
}

func TestWithKeeperRefusesConflictingOptions(t *testing.T) {
	m := testkit.Must(memlock.New())
	k := testkit.Must(lock.NewKeeper(m, 3*time.Second))
	defer k.Close(context.Background())
	fn := func(context.Context) error { return nil }
	for name, opts := range map[string][]leader.Option{
		"another ttl":      {leader.WithKeeper(k), leader.WithTTL(time.Minute)},
		"a renew interval": {leader.WithKeeper(k), leader.WithRenewInterval(time.Second)},
		"a nil Keeper":     {leader.WithKeeper(nil)},
	} {
		if err := leader.Run(t.Context(), m, "x", fn, opts...); !errors.Is(err, lock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// With a closed Keeper, Run returns the Keeper's refusal: at once when
// the Keeper was closed before Run, and after the term when it closes
// during one. No term is announced for a grant the Keeper refused, and
// the grant is released. Each campaign won the key, announced a term
// (log, metrics, OnElected), failed to keep it and campaigned again a
// retry interval later, for ever: fn never ran and Run never returned.
func TestWithAClosedKeeperRunReturnsItsRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(m, 3*time.Second))
		if err := k.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var elections, runs int
		start := time.Now()
		err := leader.Run(ctx, m, "closed", func(ctx context.Context) error {
			runs++
			<-ctx.Done()
			return nil
		}, leader.WithKeeper(k), leader.WithRetryInterval(2*time.Second), leader.OnElected(func(leader.Term) { elections++ }))
		if !errors.Is(err, lock.ErrInvalidArgument) || time.Since(start) != 0 || elections+runs != 0 {
			t.Fatalf("Run with a closed Keeper: %v after %v, %d elections, %d runs; want ErrInvalidArgument at once, no term",
				err, time.Since(start), elections, runs)
		}
		if h, err := m.TryAcquire(t.Context(), leader.Key("closed"), time.Second); err != nil {
			t.Fatalf("the refused grant was not released: %v", err)
		} else {
			_ = h.Release(t.Context())
		}

		k = testkit.Must(lock.NewKeeper(m, 3*time.Second))
		runs = 0
		err = leader.Run(ctx, m, "closing", func(ctx context.Context) error {
			if runs++; runs == 1 {
				go k.Close(context.Background())
			}
			<-ctx.Done()
			return nil
		}, leader.WithKeeper(k), leader.WithRetryInterval(2*time.Second))
		if !errors.Is(err, lock.ErrInvalidArgument) || runs != 1 || ctx.Err() != nil {
			t.Fatalf("Run with a Keeper closed during a term: %v after %d terms (ctx %v); want ErrInvalidArgument after one",
				err, runs, ctx.Err())
		}
	})
}
