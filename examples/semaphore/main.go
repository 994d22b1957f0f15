// Command semaphore caps concurrent calls to a fragile downstream with a
// global semaphore used directly: many goroutines Acquire a slot, call the
// downstream for longer than the ttl (the lease renews the slot meanwhile)
// and Release it. Never more than -slots calls run at once, across every
// process that shares the backend.
//
//	go run ./examples/semaphore                                  # in memory
//	go run ./examples/semaphore -backend redis://127.0.0.1:6379  # run it in several terminals at once
//	go run ./examples/semaphore -backend etcd://127.0.0.1:2379 -ttl 2s -work 3s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// config is what the flags set.
type config struct {
	url     string        // the backend
	workers int           // goroutines in this process
	slots   int           // the semaphore's size
	calls   int           // calls per worker
	ttl     time.Duration // how long a dead process keeps its slot
	work    time.Duration // how long one call takes: longer than the ttl
}

func main() {
	var c config
	flag.StringVar(&c.url, "backend", "mem://demo", "backend URL (mem://NAME, redis://host:port, postgres://..., etcd://host:port)")
	flag.IntVar(&c.workers, "workers", 9, "goroutines in this process")
	flag.IntVar(&c.slots, "slots", 3, "semaphore size: calls allowed at once across every process")
	flag.IntVar(&c.calls, "calls", 1, "calls per goroutine")
	flag.DurationVar(&c.ttl, "ttl", time.Second, "how long a slot stays taken after its process dies (at least the backend's minimum)")
	flag.DurationVar(&c.work, "work", 1500*time.Millisecond, "how long one call takes (longer than -ttl on purpose)")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "semaphore:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, c config) error {
	l, closeFn, err := backend.Open(ctx, c.url, backend.WithCommon(lock.Common{Owner: fmt.Sprintf("semaphore-example/%d", os.Getpid())}))
	if err != nil {
		return err
	}
	defer closeFn()
	// One semaphore, used by every goroutine of this process.
	sem, err := semaphore.New(l, "downstream", c.slots)
	if err != nil {
		return err
	}
	var (
		inFlight, peak atomic.Int32
		mu             sync.Mutex
		wg             sync.WaitGroup
		errs           = make(chan error, c.workers)
		start          = time.Now()
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "+%5.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	call := func(w int) error {
		lease, err := sem.Acquire(ctx, c.ttl) // waits for a slot, then keeps it until Release
		if err != nil {
			return err
		}
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		say("worker %d calls the downstream on slot %d (token %d, %d in flight here)", w, lease.Slot(), lease.Token(), n)
		select {
		case <-time.After(c.work): // the call, longer than the ttl
		case <-lease.Context().Done(): // the slot was lost: stop
		}
		inFlight.Add(-1)
		return lease.Release(ctx) // stops the renewal; lock.ErrLost if the slot was lost
	}
	for w := range c.workers {
		wg.Go(func() {
			for range c.calls {
				if err := call(w); err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d calls of %v by %d goroutines through %d slots with a %v ttl; at most %d in flight at once in this process\n",
		c.workers*c.calls, c.work, c.workers, c.slots, c.ttl, peak.Load())
	if int(peak.Load()) > c.slots {
		return fmt.Errorf("the cap was exceeded: %d > %d", peak.Load(), c.slots)
	}
	return nil
}
