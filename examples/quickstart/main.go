// Command quickstart shows what a fenced lease buys you, in a few seconds:
// three simulated hosts (in memory by default, or each with its own
// connection to the backend -backend names) take turns on one lock through
// lock.Do and append to a ledger that checks fencing tokens. One host is
// paused past its ttl on purpose (think of a long GC pause or SIGSTOP); a
// successor takes over, and when the paused host wakes up and writes, the
// ledger refuses its stale token.
//
//	go run ./examples/quickstart                                  # in memory
//	go run ./examples/quickstart -backend redis://127.0.0.1:6379  # on a real backend
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/lock"
)

const (
	shortTTL = 300 * time.Millisecond // the ttl, unless the backend's minimum is longer
	rounds   = 3
	work     = 40 * time.Millisecond
)

func main() {
	url := flag.String("backend", "mem://quickstart", "backend URL (mem://NAME, redis://host:port, postgres://..., etcd://host:port)")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *url); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// ledger is the protected resource: it accepts an entry only from a token at
// least as new as the newest it has seen.
type ledger struct {
	fence   lock.Fence
	entries []string
}

// grantLog records each grant's validity so that overlaps can be counted.
type grantLog struct {
	mu     sync.Mutex
	spans  [][2]time.Time
	stale  int
	events []event
}

type event struct {
	at   time.Time
	text string
}

func (g *grantLog) say(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.events = append(g.events, event{time.Now(), fmt.Sprintf(format, args...)})
}

func run(ctx context.Context, out io.Writer, url string) error {
	// Silence the library's own log lines; the timeline below tells the story.
	quiet := lock.Common{Logger: slog.New(slog.DiscardHandler)}
	// Three hosts, each with its own connection to one backend (in memory:
	// one table of grants, as one server).
	hosts := map[string]lock.Lock{}
	for _, name := range []string{"host-a", "host-b", "host-c"} {
		l, closeFn, err := backend.Open(ctx, url, backend.WithCommon(quiet), backend.WithCommon(lock.Common{Owner: name}))
		if err != nil {
			return err
		}
		defer closeFn()
		hosts[name] = l
	}
	// The ttl: 300 ms, or the backend's shortest (etcd rounds a shorter one
	// up to its MinTTL, 2 s by default).
	ttl := max(shortTTL, lock.LimitsOf(hosts["host-a"]).MinTTL)
	if e, ok := hosts["host-a"].(interface{ MinTTL() time.Duration }); ok {
		ttl = max(ttl, e.MinTTL())
	}
	pause := 3 * ttl
	key := fmt.Sprintf("quickstart/ledger/%d", time.Now().UnixNano()) // this run's own
	var (
		led  ledger
		log  grantLog
		wg   sync.WaitGroup
		errs = make(chan error, 3)
	)
	start := time.Now()
	cHolds := make(chan struct{}) // host-c goes first, so that its pause blocks the others
	for _, name := range []string{"host-c", "host-a", "host-b"} {
		host := hosts[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if name != "host-c" {
				<-cHolds
			}
			for round := 1; round <= rounds; round++ {
				stall := name == "host-c" && round == 1
				l := host
				if stall {
					l = &paused{Lock: host, until: make(chan struct{})}
				}
				err := lock.Do(ctx, l, key, func(ctx context.Context) error {
					token, _ := lock.TokenFrom(ctx)
					acquired := time.Now()
					var lostAt time.Time
					stop := context.AfterFunc(ctx, func() {
						log.mu.Lock()
						lostAt = time.Now()
						log.mu.Unlock()
						log.say("%s's lease ends: %v (the host is paused and cannot see it)", name, context.Cause(ctx))
					})
					log.say("%s acquired the lock, token %d", name, token)
					if stall {
						log.say("%s is paused (simulated GC pause) for %v, past its %v ttl", name, pause, ttl)
						close(cHolds)
						time.Sleep(pause) // a paused process notices nothing
						close(l.(*paused).until)
						log.say("%s wakes up; its lease context says: %v", name, context.Cause(ctx))
					} else {
						time.Sleep(work)
					}
					werr := led.fence.Do(token, func() {
						led.entries = append(led.entries, fmt.Sprintf("%s#%d", name, token))
					})
					if werr != nil {
						log.say("%s writes with token %d: REJECTED by the ledger (%v)", name, token, werr)
					} else {
						log.say("%s writes with token %d: accepted", name, token)
					}
					stop()
					log.mu.Lock()
					if werr != nil {
						log.stale++
					}
					end := time.Now()
					if p, ok := l.(*paused); ok && !lostAt.IsZero() {
						// The grant stopped being valid at its ValidUntil; the
						// lease learns of it a moment later (lostAt), by when a
						// successor may already hold the key.
						end = p.held.ValidUntil()
					}
					log.spans = append(log.spans, [2]time.Time{acquired, end})
					log.mu.Unlock()
					return nil
				}, lock.WithTTL(ttl), lock.WithCommon(quiet))
				switch {
				case errors.Is(err, lock.ErrLost):
					log.say("%s: lock.Do reports the loss: %v", name, err)
				case err != nil:
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	fmt.Fprintln(out, "timeline (three hosts, one lock, ttl", ttl.String()+"):")
	sort.SliceStable(log.events, func(i, j int) bool { return log.events[i].at.Before(log.events[j].at) })
	for _, e := range log.events {
		fmt.Fprintf(out, "  +%6.3fs  %s\n", e.at.Sub(start).Seconds(), e.text)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "summary:")
	fmt.Fprintf(out, "  grants:                          %d\n", len(log.spans))
	fmt.Fprintf(out, "  max simultaneous valid holders:  %d\n", maxOverlap(log.spans))
	fmt.Fprintf(out, "  stale writes rejected:           %d\n", log.stale)
	fmt.Fprintf(out, "  ledger:                          %v\n", led.entries)
	fmt.Fprintf(out, "  took:                            %v\n", time.Since(start).Round(time.Millisecond))
	if log.stale != 1 || maxOverlap(log.spans) != 1 {
		return fmt.Errorf("expected exactly one stale write rejected and never two valid holders")
	}
	return nil
}

// maxOverlap counts the most grant validity spans open at one instant.
func maxOverlap(spans [][2]time.Time) int {
	type edge struct {
		at   time.Time
		open int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s[0], 1}, edge{s[1], -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].open < edges[j].open // close before open
		}
		return edges[i].at.Before(edges[j].at)
	})
	n, best := 0, 0
	for _, e := range edges {
		n += e.open
		best = max(best, n)
	}
	return best
}

// paused wraps a host's lock so that its lease renewals freeze while the
// host is paused, as they would in a stopped process.
type paused struct {
	lock.Lock
	until chan struct{}
	held  lock.Handle // the last grant, read by the same goroutine
}

func (p *paused) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	h, err := p.Lock.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	p.held = h
	return &frozenHandle{Handle: h, until: p.until}, nil
}

type frozenHandle struct {
	lock.Handle
	until chan struct{}
}

func (h *frozenHandle) Extend(ctx context.Context, ttl time.Duration) error {
	select {
	case <-h.until:
		return h.Handle.Extend(ctx, ttl)
	case <-ctx.Done():
		return ctx.Err()
	}
}
