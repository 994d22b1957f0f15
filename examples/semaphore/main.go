// Command semaphore caps concurrent calls to a fragile downstream with a
// global semaphore: several workers, each with its own backend instance (as
// separate processes would have), share "downstream" slots.
//
//	go run ./examples/semaphore                                  # in memory
//	go run ./examples/semaphore -backend redis://127.0.0.1:6379  # run it in several terminals at once
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
)

func main() {
	url := flag.String("backend", "mem://demo", "backend URL (mem://NAME, redis://host:port, ...)")
	workers := flag.Int("workers", 6, "workers in this process")
	slots := flag.Int("slots", 3, "semaphore size: calls allowed at once across every process")
	calls := flag.Int("calls", 4, "calls per worker")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *url, *workers, *slots, *calls); err != nil {
		fmt.Fprintln(os.Stderr, "semaphore:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, url string, workers, slots, calls int) error {
	var (
		inFlight, peak atomic.Int32
		mu             sync.Mutex
		wg             sync.WaitGroup
		errs           = make(chan error, workers)
		start          = time.Now()
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "+%5.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	for w := range workers {
		l, closeFn, err := backend.Open(ctx, url, backend.WithCommon(lock.Common{Owner: fmt.Sprintf("worker-%d/%d", w, os.Getpid())}))
		if err != nil {
			return err
		}
		defer closeFn()
		sem, err := semaphore.New(l, "downstream", slots, semaphore.WithTTL(5*time.Second))
		if err != nil {
			return err
		}
		wg.Go(func() {
			for range calls {
				err := sem.Do(ctx, func(ctx context.Context) error {
					n := inFlight.Add(1)
					defer inFlight.Add(-1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					token, _ := lock.TokenFrom(ctx)
					say("worker %d calls the downstream (token %d, %d in flight here)", w, token, n)
					time.Sleep(time.Duration(20+rand.N(40)) * time.Millisecond) // the call
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d calls by %d workers through %d slots; at most %d in flight at once in this process\n",
		workers*calls, workers, slots, peak.Load())
	if int(peak.Load()) > slots {
		return fmt.Errorf("the cap was exceeded: %d > %d", peak.Load(), slots)
	}
	return nil
}
