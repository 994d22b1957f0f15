package leader_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit"
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
func runBriefly(t *testing.T, l lock.Lock, name string, opts ...leader.Option) (err error, elected bool) {
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

// One rule for election names (backendkit.CheckName), in Run, Observe and
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
		err, elected := runBriefly(t, testkit.Must(memlock.New()), name)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "election name") || elected {
			t.Errorf("Run, %s: %v (elected %v), want ErrInvalidArgument about the election name", what, err, elected)
		}
		_, _, err = leader.Observe(t.Context(), testkit.Must(memlock.New()), name)
		if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "election name") {
			t.Errorf("Observe, %s: %v", what, err)
		}
		if name == "" {
			continue // ObserveAll's "" is every election
		}
		if _, err := leader.ObserveAll(t.Context(), testkit.Must(memlock.New()), name); !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "election name prefix") {
			t.Errorf("ObserveAll, %s: %v", what, err)
		}
	}
	long := strings.Repeat("é", lock.MaxNameLen/2)
	if err, elected := runBriefly(t, testkit.Must(memlock.New()), long); err != nil || !elected {
		t.Errorf("a name of %d bytes: %v (elected %v)", len(long), err, elected)
	}
}

// Every duration option is bounded, the lease by the backend's limits,
// and the error names the option: a lease of MaxInt64 came back from the
// backend as an anonymous invalid ttl, and a renew interval of MaxInt64/2
// overflowed the "at most a third of the lease" check, so every term
// ended at once and Run campaigned again, forever.
func TestDurationOptionsWithinLimits(t *testing.T) {
	l := limited{testkit.Must(memlock.New()), lock.Limits{MinTTL: 10 * time.Millisecond, MaxTTL: time.Hour}}
	for _, c := range []struct {
		option string
		opts   []leader.Option
		target error
	}{
		{"WithTTL", []leader.Option{leader.WithTTL(math.MaxInt64)}, lock.ErrInvalidTTL},
		{"WithTTL", []leader.Option{leader.WithTTL(2 * time.Hour)}, lock.ErrInvalidTTL}, // above the backend's maximum
		{"WithTTL", []leader.Option{leader.WithTTL(6 * time.Millisecond), leader.WithRenewInterval(2 * time.Millisecond)}, lock.ErrInvalidTTL},
		{"WithRenewInterval", []leader.Option{leader.WithRenewInterval(math.MaxInt64 / 2)}, lock.ErrInvalidArgument},
		{"WithRenewInterval", []leader.Option{leader.WithTTL(30 * time.Minute), leader.WithRenewInterval(math.MaxInt64 / 2)}, lock.ErrInvalidArgument},
		{"WithRenewInterval", []leader.Option{leader.WithTTL(time.Second), leader.WithRenewInterval(time.Nanosecond)}, lock.ErrInvalidArgument},
		{"WithRetryInterval", []leader.Option{leader.WithRetryInterval(time.Nanosecond)}, lock.ErrInvalidArgument},
		{"WithRetryInterval", []leader.Option{leader.WithRetryInterval(math.MaxInt64)}, lock.ErrInvalidArgument},
	} {
		err, elected := runBriefly(t, l, "limits", c.opts...)
		if !errors.Is(err, c.target) || !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), c.option) || elected {
			t.Errorf("%s: %v (elected %v), want %v naming the option", c.option, err, elected, c.target)
		}
	}
	for _, opts := range [][]leader.Option{
		{leader.WithTTL(time.Hour), leader.WithRenewInterval(20 * time.Minute), leader.WithRetryInterval(lock.MaxTTL)},
		{leader.WithTTL(10 * time.Millisecond), leader.WithRenewInterval(3 * time.Millisecond), leader.WithRetryInterval(leader.MinInterval)},
	} {
		if err, elected := runBriefly(t, l, "limits", opts...); err != nil || !elected {
			t.Errorf("options at their limits: %v (elected %v)", err, elected)
		}
	}
}
