// Command leader gates a recovery-like loop behind leader election: several
// candidates campaign, one scans, and when it shuts down (or dies) another
// takes over, with a higher term that stamps its writes.
//
//	go run ./examples/leader                                  # in memory
//	go run ./examples/leader -backend redis://127.0.0.1:6379  # run it in several terminals, kill one
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
)

func main() {
	url := flag.String("backend", "mem://demo", "backend URL (mem://NAME, redis://host:port, ...)")
	candidates := flag.Int("candidates", 3, "candidates in this process")
	handovers := flag.Int("handovers", 2, "times the current leader shuts down (0: run until interrupted)")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *url, *candidates, *handovers); err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, url string, candidates, handovers int) error {
	var (
		mu      sync.Mutex
		fence   lock.Fence // the "database" the scans write to
		start   = time.Now()
		wg      sync.WaitGroup
		elected = make(chan int, candidates)
		stops   = make([]context.CancelFunc, candidates)
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "+%5.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	opts := []leader.Option{leader.WithTTL(3 * time.Second), leader.WithRenewInterval(time.Second), leader.WithRetryInterval(time.Second)}
	for c := range candidates {
		l, closeFn, err := backend.Open(ctx, url, backend.WithCommon(lock.Common{Owner: fmt.Sprintf("candidate-%d/%d", c, os.Getpid())}))
		if err != nil {
			return err
		}
		defer closeFn()
		cctx, stop := context.WithCancel(ctx)
		stops[c] = stop
		wg.Go(func() {
			_ = leader.Run(cctx, l, "recovery-scan", func(ctx context.Context) error {
				term, _ := lock.TokenFrom(ctx)
				say("candidate %d leads (term %d)", c, term)
				elected <- c
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for scans := 1; ; scans++ {
					select {
					case <-ctx.Done():
						say("candidate %d stops scanning: %v", c, context.Cause(ctx))
						return nil
					case <-tick.C:
						if err := fence.Do(term, nil); err != nil {
							say("candidate %d: write refused: %v", c, err)
							return err
						}
						if scans%3 == 0 {
							say("candidate %d (term %d) scanned for stuck jobs", c, term)
						}
					}
				}
			}, opts...)
		})
	}
	for i := 0; handovers == 0 || i <= handovers; i++ {
		c := <-elected
		if handovers == 0 {
			continue
		}
		time.Sleep(400 * time.Millisecond) // let it work a little
		if i == handovers {
			break
		}
		say("shutting candidate %d down: it resigns, a peer takes over", c)
		stops[c]()
	}
	for _, stop := range stops {
		stop()
	}
	wg.Wait()
	fmt.Fprintf(out, "\n%d handovers; the last term written was %d\n", handovers, fence.Highest())
	return nil
}
