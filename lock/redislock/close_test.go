package redislock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/stacks"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// listeners returns the ids of the goroutines running a Lock's release
// listener: those started by ensureSubscribed (one that has not run yet
// shows only a wrapper in its stack, so the creator is what identifies it).
// Goroutine ids are never reused.
func listeners() map[string]bool {
	ids := map[string]bool{}
	for id, g := range stacks.All() {
		if strings.Contains(g, "created by github.com/leasehold-go/leasehold/lock/redislock.(*Lock).ensureSubscribed") {
			ids[id] = true
		}
	}
	return ids
}

// waitGone polls, for up to 5 s, until none of the goroutines ids runs.
func waitGone(t *testing.T, ids map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		running := 0
		for id := range listeners() {
			if ids[id] {
				running++
			}
		}
		if running == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the release listener still runs 5 s after Close")
		}
		runtime.Gosched()
	}
}

// TestClose: Close wakes the subscriptions still open, ends the listener
// goroutine, makes a later Subscribe fail with a clear error, and may be
// called again.
func TestClose(t *testing.T) {
	c := newClient(t, testenv.Redis(t).Addr())
	l, err := redislock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	before := listeners() // other tests' Locks may still be closing
	sub, err := l.Subscribe(ctx, "close/"+lock.NewOwner())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ours := map[string]bool{}
	for id := range listeners() {
		if !before[id] {
			ours[id] = true
		}
	}
	if len(ours) != 1 {
		t.Fatalf("%d new release listeners after the first Subscribe, want 1", len(ours))
	}
	woken := make(chan error, 1)
	go func() { woken <- sub.Wait(ctx, 0) }() // no hint: only a notification ends it

	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-woken:
		if err != nil {
			t.Fatalf("Wait after Close: %v, want nil (woken)", err)
		}
	case <-ctx.Done():
		t.Fatal("an open subscription's Wait was not woken by Close")
	}
	waitGone(t, ours)

	_, err = l.Subscribe(ctx, "close/after")
	if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Subscribe after Close: %v, want an ErrInvalidArgument that says the Lock is closed", err)
	}
	if _, err := l.AcquireQueued(ctx, "close/after", time.Second); !errors.Is(err, lock.ErrInvalidArgument) {
		t.Fatalf("AcquireQueued after Close: %v, want ErrInvalidArgument", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The client is the caller's: it, and the operations that need no
	// subscription, still work.
	h, err := l.TryAcquire(ctx, "close/after", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release after Close: %v", err)
	}
}
