package leader_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// limited is a memlock that states other limits.
type limited struct {
	*memlock.Lock
	lim lock.Limits
}

func (l limited) Limits() lock.Limits { return l.lim }

// runBriefly runs leader.Run until its first term or for at most a minute
// of bubble time: input that Run used to accept campaigned (or looped)
// until its context ended, and returned nil then.
func runBriefly(t *testing.T, l lock.Lock, name string, opts ...lock.Option) (err error, elected bool) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err = leader.Run(ctx, l, name, func(context.Context) error {
			elected = true
			cancel() // one term is enough
			return nil
		}, opts...)
	})
	return err, elected
}

// One rule for election names (lock.CheckName), in Run, Observe and
// ObserveAll's prefix: Run accepted a NUL that Observe refused.
func TestElectionNames(t *testing.T) {
	for what, name := range map[string]string{
		"empty":        "",
		"NUL":          "a\x00b",
		"newline":      "a\nb",
		"escape":       "\x1b[31m",
		"invalid UTF8": "a\xffb",
		"brace":        "a{b}",
		"too long":     strings.Repeat("x", lock.MaxNameLen+1),
	} {
		err, elected := runBriefly(t, memlock.New(), name)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "election name") || elected {
			t.Errorf("Run, %s: %v (elected %v), want ErrInvalidArgument about the election name", what, err, elected)
		}
		_, _, err = leader.Observe(t.Context(), memlock.New(), name)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "election name") {
			t.Errorf("Observe, %s: %v", what, err)
		}
		if name == "" {
			continue // ObserveAll's "" is every election
		}
		if _, err := leader.ObserveAll(t.Context(), memlock.New(), name); !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "election name prefix") {
			t.Errorf("ObserveAll, %s: %v", what, err)
		}
	}
	long := strings.Repeat("é", lock.MaxNameLen/2)
	if err, elected := runBriefly(t, memlock.New(), long); err != nil || !elected {
		t.Errorf("a name of %d bytes: %v (elected %v)", len(long), err, elected)
	}
}

// Every duration option is bounded, the lease by the backend's limits,
// and the error names the option: a lease of MaxInt64 came back from the
// backend as an anonymous invalid ttl, and a renew interval of MaxInt64/2
// overflowed the "at most a third of the lease" check, so every term
// ended at once and Run campaigned again, forever.
func TestDurationOptionsWithinLimits(t *testing.T) {
	l := limited{memlock.New(), lock.Limits{MinTTL: 10 * time.Millisecond, MaxTTL: time.Hour}}
	for _, c := range []struct {
		option string
		opts   []lock.Option
		target error
	}{
		{"WithLease", []lock.Option{leader.WithLease(math.MaxInt64)}, lock.ErrInvalidTTL},
		{"WithLease", []lock.Option{leader.WithLease(2 * time.Hour)}, lock.ErrInvalidTTL}, // above the backend's maximum
		{"WithLease", []lock.Option{leader.WithLease(6 * time.Millisecond), leader.WithRenewEvery(2 * time.Millisecond)}, lock.ErrInvalidTTL},
		{"WithRenewEvery", []lock.Option{leader.WithRenewEvery(math.MaxInt64 / 2)}, lock.ErrInvalidArgument},
		{"WithRenewEvery", []lock.Option{leader.WithLease(30 * time.Minute), leader.WithRenewEvery(math.MaxInt64 / 2)}, lock.ErrInvalidArgument},
		{"WithRenewEvery", []lock.Option{leader.WithLease(time.Second), leader.WithRenewEvery(time.Nanosecond)}, lock.ErrInvalidArgument},
		{"WithRetry", []lock.Option{leader.WithRetry(time.Nanosecond)}, lock.ErrInvalidArgument},
		{"WithRetry", []lock.Option{leader.WithRetry(math.MaxInt64)}, lock.ErrInvalidArgument},
	} {
		err, elected := runBriefly(t, l, "limits", c.opts...)
		if !errors.Is(err, c.target) || !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), c.option) || elected {
			t.Errorf("%s: %v (elected %v), want %v naming the option", c.option, err, elected, c.target)
		}
	}
	for _, opts := range [][]lock.Option{
		{leader.WithLease(time.Hour), leader.WithRenewEvery(20 * time.Minute), leader.WithRetry(lock.MaxTTL)},
		{leader.WithLease(10 * time.Millisecond), leader.WithRenewEvery(3 * time.Millisecond), leader.WithRetry(leader.MinInterval)},
	} {
		if err, elected := runBriefly(t, l, "limits", opts...); err != nil || !elected {
			t.Errorf("options at their limits: %v (elected %v)", err, elected)
		}
	}
}
