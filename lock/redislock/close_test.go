package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/redislock"
)

// listeners counts the goroutines running a Lock's release listener: the
// goroutines started by ensureSubscribed (one that has not run yet shows
// only a wrapper in its stack, so the creator is what identifies it).
func listeners() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("created by github.com/leasehold-go/leasehold/lock/redislock.(*Lock).ensureSubscribed"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitListeners polls until at most n listeners run, for up to 5 s.
func waitListeners(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for listeners() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d release listeners still run 5 s after Close, want at most %d", listeners(), n)
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
	before := listeners()
	sub, err := l.Subscribe(ctx, "close/"+lock.NewOwner())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if n := listeners(); n != before+1 {
		t.Fatalf("%d listeners after the first Subscribe, want %d", n, before+1)
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
	waitListeners(t, before)

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
