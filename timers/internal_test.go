package timers

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// RetryOnError's backoff doubles up to lock.MaxTTL and no further: it
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
		tm := Every("retry", time.Hour, fn, RetryOnError(4, lock.MaxTTL/2))
		if tm.err != nil {
			t.Fatal(tm.err)
		}
		e := &entry{t: tm, s: New(memlock.New())}
		if err := e.call(t.Context()); err == nil {
			t.Fatal("no error")
		}
		if want := []time.Duration{0, lock.MaxTTL / 2, lock.MaxTTL, lock.MaxTTL, lock.MaxTTL}; !slices.Equal(gaps, want) {
			t.Fatalf("attempts %v apart, want %v", gaps, want)
		}
	})
}
