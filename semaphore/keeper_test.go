package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// With WithKeeper, the permits of Acquire and Do are leases of the Keeper:
// no goroutine each, renewed in the Keeper's rounds through the backend's
// Batch (the Permit unwraps to the backend's grant), and kept past their
// ttl as before.
func TestWithKeeperKeepsPermitsInTheKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := testkit.Must(memlock.New())
		k := testkit.Must(lock.NewKeeper(m, time.Second))
		defer k.Close(context.Background())
		sem := testkit.Must(semaphore.New(m, uniqueName(t), 20, semaphore.WithKeeper(k)))
		var leases []*semaphore.Lease
		for range 20 {
			leases = append(leases, testkit.Must(sem.Acquire(t.Context(), time.Second)))
		}
		if k.Len() != 20 {
			t.Fatalf("Keeper holds %d leases, want the 20 permits", k.Len())
		}
		time.Sleep(5 * time.Second) // five ttls
		synctest.Wait()
		for i, l := range leases {
			if l.Err() != nil {
				t.Fatalf("permit %d lost while the Keeper renews: %v", i, l.Err())
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		if _, err := sem.AcquirePermit(ctx, time.Second); !errors.Is(err, context.DeadlineExceeded) {
			// AcquirePermit waits; with all 20 slots kept it must not
			// return before ctx ends.
			t.Fatalf("a 21st permit on 20 kept slots: %v", err)
		}
		cancel()
		_ = leases[0].Release(t.Context())
		if k.Len() != 19 {
			t.Fatalf("Keeper holds %d leases after one Release, want 19", k.Len())
		}
		err := sem.Do(t.Context(), func(ctx context.Context) error {
			if k.Len() != 20 {
				return fmt.Errorf("Keeper holds %d leases during Do, want 20", k.Len())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestWithKeeperRefusesAnotherTTL(t *testing.T) {
	m := testkit.Must(memlock.New())
	k := testkit.Must(lock.NewKeeper(m, time.Second))
	defer k.Close(context.Background())
	if _, err := semaphore.New(m, "s", 2, semaphore.WithKeeper(k), semaphore.WithTTL(2*time.Second)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("New with WithTTL other than the Keeper's: %v, want ErrInvalidArgument", err)
	}
	if _, err := semaphore.New(m, "s", 2, semaphore.WithKeeper(nil)); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("WithKeeper(nil): %v, want ErrInvalidArgument", err)
	}
	sem := testkit.Must(semaphore.New(m, "s", 2, semaphore.WithKeeper(k)))
	if _, err := sem.Acquire(t.Context(), 2*time.Second); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("Acquire with a ttl other than the Keeper's: %v, want ErrInvalidArgument", err)
	}
}
