package timers

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// WithRetries's backoff doubles up to lock.MaxTTL and no further: it
// used to double without a bound, and a backoff that overflowed turned
// negative and retried at once.
func TestRetryBackoffStopsDoubling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var gaps []time.Duration
		last := time.Now()
		fn := func(context.Context) error {
			gaps = append(gaps, time.Since(last))
			last = time.Now()
			return errors.New("boom")
		}
		tm := Every("retry", time.Hour, fn, WithRetries(4, lock.MaxTTL/2))
		if tm.err != nil {
			t.Fatal(tm.err)
		}
		e := &entry{t: tm, s: testkit.Must(New(testkit.Must(memlock.New())))}
		if err := e.call(t.Context()); err == nil {
			t.Fatal("no error")
		}
		if want := []time.Duration{0, lock.MaxTTL / 2, lock.MaxTTL, lock.MaxTTL, lock.MaxTTL}; !slices.Equal(gaps, want) {
			t.Fatalf("attempts %v apart, want %v", gaps, want)
		}
	})
}

// Every name and key derived from the longest valid timer name is accepted
// downstream: the semaphore name, its slot keys up to WithMaxConcurrency's
// largest, and the claim key of any tick a time.Time of Unix nanoseconds
// holds, up to WithRunsPerTick's largest.
func TestDerivedNamesWithinLimits(t *testing.T) {
	name := strings.Repeat("n", MaxNameLen)
	if err := checkName("timer name", name); err != nil {
		t.Fatal(err)
	}
	if err := backendkit.CheckName("semaphore name", namePrefix+name); err != nil {
		t.Fatal(err)
	}
	keys := []string{semaphore.SlotKey(namePrefix+name, 1023), claimKey(name, time.Unix(0, math.MinInt64), 1023), claimKey(name, time.Unix(0, math.MaxInt64), 1023)}
	for _, k := range keys {
		if err := lock.CheckKey(k); err != nil {
			t.Errorf("%d-byte key: %v", len(k), err)
		}
	}
	if _, err := semaphore.New(testkit.Must(memlock.New()), namePrefix+name, 1024); err != nil {
		t.Fatal(err)
	}
}
