// Command readwrite shows the two lock shapes beside the exclusive lease.
//
// Readers and a writer share one configuration: many readers hold the key
// shared at once (lock.DoShared), the writer holds it exclusive (lock.Do)
// while it rewrites the configuration in two steps, and no reader ever
// sees a half-written configuration. The readers come back to back, yet the
// writer is not starved: a waiting writer stops new shared grants.
//
// Then transfers between accounts lock both accounts at once
// (lock.DoAll): every key of the set or none, so two transfers in
// opposite directions never deadlock.
//
//	go run ./examples/readwrite                                  # in memory
//	go run ./examples/readwrite -backend redis://127.0.0.1:6379
//	go run ./examples/readwrite -backend etcd://127.0.0.1:2379 -ttl 2s
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
)

// config is what the flags set.
type config struct {
	url      string        // the backend
	readers  int           // reader goroutines
	writes   int           // configuration rewrites
	ttl      time.Duration // the leases' ttl
	duration time.Duration // how long a reader reads, and a writer writes, per grant
}

func main() {
	var c config
	flag.StringVar(&c.url, "backend", "mem://demo", "backend URL (mem://NAME, redis://host:port, postgres://..., etcd://host:port)")
	flag.IntVar(&c.readers, "readers", 8, "reader goroutines, each reading back to back")
	flag.IntVar(&c.writes, "writes", 3, "configuration rewrites by the writer")
	flag.DurationVar(&c.ttl, "ttl", 2*time.Second, "the leases' ttl (at least the backend's minimum)")
	flag.DurationVar(&c.duration, "hold", 20*time.Millisecond, "how long one read or one write takes")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, c); err != nil {
		fmt.Fprintln(os.Stderr, "readwrite:", err)
		os.Exit(1)
	}
}

// settings is the shared configuration: a writer sets both fields, one
// after the other; a reader that sees them differ saw a torn write.
type settings struct {
	mu      sync.Mutex
	version int
	check   int
}

func (s *settings) set(step func(s *settings)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	step(s)
}

func (s *settings) read() (version, check int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.check
}

func run(ctx context.Context, out io.Writer, c config) error {
	l, closeFn, err := backend.Open(ctx, c.url, backend.WithCommon(lock.Common{Owner: fmt.Sprintf("readwrite-example/%d", os.Getpid())}))
	if err != nil {
		return err
	}
	defer closeFn()
	rw, ok := l.(lock.SharedLock)
	if !ok {
		return fmt.Errorf("the backend %T grants no shared leases", l)
	}
	start := time.Now()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, "+%5.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	opts := []lock.Option{lock.WithTTL(c.ttl)}
	key := fmt.Sprintf("example/config/%d", start.UnixNano())

	// Readers and a writer on one key.
	var (
		cfg          settings
		reads, torn  atomic.Int64
		readersDone  = make(chan struct{})
		wg           sync.WaitGroup
		errMu        sync.Mutex
		errs         []error
		longestWrite time.Duration
	)
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		errs = append(errs, err)
	}
	for range c.readers {
		wg.Go(func() {
			for {
				select {
				case <-readersDone:
					return
				default:
				}
				err := lock.DoShared(ctx, rw, key, func(ctx context.Context) error {
					v, chk := cfg.read()
					time.Sleep(c.duration) // reading, with other readers
					if v2, chk2 := cfg.read(); v != chk || v2 != v || chk2 != chk {
						torn.Add(1)
					}
					reads.Add(1)
					return nil
				}, opts...)
				if err != nil {
					fail(fmt.Errorf("reader: %w", err))
					return
				}
			}
		})
	}
	for i := 1; i <= c.writes; i++ {
		asked := time.Now()
		err := lock.Do(ctx, rw, key, func(ctx context.Context) error {
			waited := time.Since(asked)
			longestWrite = max(longestWrite, waited)
			token, _ := lock.TokenFrom(ctx)
			say("writer: version %d (token %d), after waiting %v for %d readers' shares to drain", i, token, waited.Round(time.Millisecond), c.readers)
			cfg.set(func(s *settings) { s.version = i })
			time.Sleep(c.duration) // a write in two steps: no reader may see it half done
			cfg.set(func(s *settings) { s.check = i })
			return nil
		}, opts...)
		if err != nil {
			close(readersDone)
			wg.Wait()
			return fmt.Errorf("writer: %w", err)
		}
	}
	close(readersDone)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	say("%d reads by %d readers beside %d writes; torn reads: %d; the writer waited at most %v",
		reads.Load(), c.readers, c.writes, torn.Load(), longestWrite.Round(time.Millisecond))
	if torn.Load() > 0 {
		return fmt.Errorf("%d reads saw a half-written configuration", torn.Load())
	}

	// All-of grants: transfers in both directions between two accounts.
	gl, ok := l.(lock.GroupLock)
	if !ok {
		return fmt.Errorf("the backend %T grants no all-of leases", l)
	}
	a, b := key+"/account/a", key+"/account/b"
	balance := map[string]int{a: 100, b: 100}
	var balMu sync.Mutex
	transfer := func(from, to string, n int) error {
		return lock.DoAll(ctx, gl, []string{from, to}, func(ctx context.Context, g lock.Group) error {
			balMu.Lock()
			defer balMu.Unlock()
			balance[from] -= n
			balance[to] += n
			return nil
		}, opts...)
	}
	var twg sync.WaitGroup
	for i := range 20 {
		twg.Go(func() {
			from, to := a, b
			if i%2 == 1 {
				from, to = b, a
			}
			if err := transfer(from, to, 10); err != nil {
				fail(fmt.Errorf("transfer: %w", err))
			}
		})
	}
	twg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	say("20 transfers in both directions, each holding both accounts: balances %d and %d, total %d",
		balance[a], balance[b], balance[a]+balance[b])
	if balance[a]+balance[b] != 200 {
		return fmt.Errorf("money was made or lost: %d", balance[a]+balance[b])
	}
	return nil
}
