package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// A worker child process takes permits of a semaphore in a loop and reports
// each one on stdout: "DONE <slot> <token> <start ns> <end ns>", measured
// between the grant and the release on the wall clock. With SEM_HOLD=forever
// it takes one permit, keeps it alive (lock.Keep renews it every third of its
// ttl), says "GOT <slot> <token>" and holds it until killed.

const childEnv = "SEM_CHILD"

func childMain() { childproc.Main(childEnv, worker) }

func worker() error {
	l, err := backends.FromEnv()
	if err != nil {
		return err
	}
	size, _ := strconv.Atoi(os.Getenv("SEM_SIZE"))
	rounds, _ := strconv.Atoi(os.Getenv("SEM_ROUNDS"))
	ttl, _ := time.ParseDuration(os.Getenv("SEM_TTL"))
	sem, err := semaphore.New(l, os.Getenv("SEM_NAME"), size)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if os.Getenv("SEM_HOLD") == "forever" {
		p, err := sem.AcquirePermit(ctx, ttl)
		if err != nil {
			return err
		}
		lease, err := lock.Keep(context.Background(), p, ttl)
		if err != nil {
			return err
		}
		fmt.Printf("GOT %d %d\n", p.Slot(), p.Token())
		<-lease.Context().Done()
		return fmt.Errorf("the permit was lost: %w", context.Cause(lease.Context()))
	}
	for range rounds {
		p, err := sem.Acquire(ctx, ttl)
		if err != nil {
			return err
		}
		start := time.Now()
		time.Sleep(2 * time.Millisecond) // the work under the permit
		end := time.Now()
		fmt.Printf("DONE %d %d %d %d\n", p.Slot(), p.Token(), start.UnixNano(), end.UnixNano())
		if err := p.Release(ctx); err != nil {
			return err
		}
	}
	fmt.Println("FINISHED")
	return nil
}

func startWorker(t *testing.T, b backends.Backend, env ...string) *childproc.Proc {
	t.Helper()
	return childproc.Start(t, append(append(b.Env, childEnv+"=1"), env...)...)
}

type use struct {
	proc, slot int
	token      uint64
	start, end int64
}

// Six processes share a semaphore of size 3 over many rounds: never more
// than 3 permits at once, each slot's permits in token order (checked
// through per-slot fenced writes), every process served.
func TestSixProcesses(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		const procs, size, rounds = 6, 3, 25
		name := uniqueName(t)
		var (
			mu   sync.Mutex
			uses []use
			wg   sync.WaitGroup
		)
		for i := range procs {
			w := startWorker(t, b, "SEM_NAME="+name, "SEM_SIZE=3", "SEM_ROUNDS="+strconv.Itoa(rounds), "SEM_TTL=10s")
			wg.Go(func() {
				finished := false
				for line := range w.Lines {
					var u use
					if line == "FINISHED" {
						finished = true
						continue
					}
					if _, err := fmt.Sscanf(line, "DONE %d %d %d %d", &u.slot, &u.token, &u.start, &u.end); err != nil {
						t.Errorf("process %d: %q", i, line)
						continue
					}
					u.proc = i
					mu.Lock()
					uses = append(uses, u)
					mu.Unlock()
				}
				if !finished {
					t.Errorf("process %d did not finish its rounds", i)
				}
			})
		}
		wg.Wait()
		// Replay the writes in time order against one fence per slot.
		sort.Slice(uses, func(i, j int) bool { return uses[i].start < uses[j].start })
		var fences [size]lock.Fence
		perProc := map[int]int{}
		for _, u := range uses {
			if u.slot < 0 || u.slot >= size {
				t.Fatalf("slot %d out of range", u.slot)
			}
			if err := fences[u.slot].Do(u.token, nil); err != nil {
				t.Errorf("slot %d: a write by process %d was stale: %v", u.slot, u.proc, err)
			}
			perProc[u.proc]++
		}
		// Sweep the intervals: at most size at once, never two on one slot.
		type edge struct {
			at   int64
			d    int
			slot int
		}
		var edges []edge
		for _, u := range uses {
			edges = append(edges, edge{u.start, 1, u.slot}, edge{u.end, -1, u.slot})
		}
		sort.Slice(edges, func(i, j int) bool {
			if edges[i].at == edges[j].at {
				return edges[i].d < edges[j].d
			}
			return edges[i].at < edges[j].at
		})
		n, peak := 0, 0
		bySlot := make([]int, size)
		for _, e := range edges {
			n += e.d
			bySlot[e.slot] += e.d
			peak = max(peak, n)
			if bySlot[e.slot] > 1 {
				t.Fatalf("slot %d held twice at %d", e.slot, e.at)
			}
		}
		if peak > size {
			t.Fatalf("%d permits at once, size %d", peak, size)
		}
		if len(uses) != procs*rounds || len(perProc) != procs {
			t.Fatalf("%d permits over %d processes, want %d over %d", len(uses), len(perProc), procs*rounds, procs)
		}
		t.Logf("%d permits, peak %d at once, per process %v", len(uses), peak, perProc)
	})
}

// A permit holder that keeps its permit alive holds its slot past the ttl;
// SIGKILLed, its slot is free again within the ttl (plus the backend's
// slack).
func TestKilledHolderFreesItsSlot(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		name := uniqueName(t)
		ttl := time.Second
		sem := newSem(t, b.New(t), name, 2)
		mine, err := sem.TryAcquire(t.Context(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer mine.Release(context.Background())
		w := startWorker(t, b, "SEM_NAME="+name, "SEM_SIZE=2", "SEM_HOLD=forever", "SEM_TTL="+ttl.String())
		w.Expect(t, "GOT ", 30*time.Second)
		granted := time.Now() // the child's grant was made before this
		// Kept alive: the slot stays taken well past one ttl.
		poll := time.NewTicker(100 * time.Millisecond)
		defer poll.Stop()
		for time.Since(granted) < 3*ttl {
			if p, err := sem.TryAcquire(t.Context(), time.Minute); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("%v after the child's grant, its kept slot went to the parent (%v, %v)", time.Since(granted), p, err)
			}
			select {
			case line, ok := <-w.Lines:
				t.Fatalf("the holder said %q (open: %v) while it should hold its permit", line, ok)
			case <-poll.C:
			}
		}
		w.Signal(t, syscall.SIGKILL)
		killed := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), ttl+b.Slack)
		defer cancel()
		p, err := sem.Acquire(ctx, time.Minute)
		if err != nil {
			t.Fatalf("the killed holder's slot was not free within ttl + slack (%v): %v", ttl+b.Slack, err)
		}
		t.Logf("slot %d free %v after SIGKILL (ttl %v)", p.Slot(), time.Since(killed).Round(time.Millisecond), ttl)
		_ = p.Release(t.Context())
	})
}
