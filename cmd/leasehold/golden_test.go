package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/cli"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// run runs the command in-process.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Run(t.Context(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// memRuns numbers the in-process tables the tests make: a mem://NAME table
// lives as long as the process, so a test run again (-count 2) needs a new
// one.
var memRuns atomic.Int64

func memURL(name string) string { return fmt.Sprintf("mem://%s-%d", name, memRuns.Add(1)) }

// fillMem makes a state on the in-process backend mem://url at the
// bubble's fixed clock: grants, a semaphore, a leader, a timer's claim and
// run, and jobs in flight, expired and dead.
func fillMem(t *testing.T, url string) (stop func()) {
	ctx := t.Context()
	open := func(owner string) lock.Lock {
		l, _, err := backend.Open(ctx, url, backend.WithCommon(lock.Common{Owner: owner}))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := open("host-a"), open("host-b")
	must(a.TryAcquire(ctx, "orders/42", 30*time.Second))
	must(b.TryAcquire(ctx, "orders/7", 2*time.Minute))
	// A semaphore of size 3 as its participants leave it: a size marker
	// and two held slots (taken by key: TryAcquire picks slots at random).
	must(a.TryAcquire(ctx, "sem/{db}/size/3", time.Minute))
	must(a.TryAcquire(ctx, semaphore.SlotKey("db", 0), time.Minute))
	must(b.TryAcquire(ctx, semaphore.SlotKey("db", 2), 45*time.Second))
	// A timer's claim of the tick at 00:00:00 and its run in slot 0.
	must(b.TryAcquire(ctx, "timer/reports/tick/946684800000", time.Hour))
	must(b.TryAcquire(ctx, semaphore.SlotKey("timer/reports", 0), 20*time.Second))
	lctx, cancel := context.WithCancel(ctx)
	elected := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = leader.Run(lctx, a, "billing", func(ctx context.Context) error {
			close(elected)
			<-ctx.Done()
			return nil
		})
	}()
	<-elected
	// A key held shared by both hosts, and an all-of grant of two keys.
	must(a.(lock.SharedLock).TryAcquireShared(ctx, "config", 50*time.Second))
	must(b.(lock.SharedLock).TryAcquireShared(ctx, "config", 40*time.Second))
	must(a.(lock.GroupLock).TryAcquireAll(ctx, []string{"transfer/a", "transfer/b"}, 90*time.Second))
	reg, _, err := ops.OpenRegistry(ctx, url, "", "")
	if err != nil {
		t.Fatal(err)
	}
	dead := must(reg.Track(ctx, jobs.Job{ID: "dead-1", Owner: "host-b", Attempt: 5}, time.Second))
	if err := reg.Bury(ctx, dead.Ref(), "recovered 5 times (MaxRetries 5): its workers keep crashing"); err != nil {
		t.Fatal(err)
	}
	must(reg.Track(ctx, jobs.Job{ID: "expired-1", Owner: "host-c", Attempt: 1}, time.Second))
	time.Sleep(3 * time.Second) // everything above is 3 s old
	must(reg.Track(ctx, jobs.Job{ID: "job-1", Owner: "host-a"}, 12*time.Second))
	return func() { cancel(); <-done }
}

// TestGolden: the tables of every command on a state made at a fixed
// clock (a synctest bubble and the in-process backend), against
// testdata/*.golden.
func TestGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		url := memURL("golden-" + strings.ReplaceAll(t.Name(), "/", "-"))
		stop := fillMem(t, url)
		defer stop()
		for _, c := range []struct {
			name string
			args []string
		}{
			{"locks", []string{"locks"}},
			{"locks-prefix", []string{"locks", "orders/"}},
			{"semaphore", []string{"semaphore", "db"}},
			{"semaphore-size", []string{"semaphore", "db", "--size", "4"}},
			{"leader", []string{"leader", "billing"}},
			{"leaders", []string{"leader"}},
			{"timers", []string{"timers"}},
			{"jobs", []string{"jobs"}},
		} {
			out, errOut, code := run(t, append(c.args, "--backend", url)...)
			if code != cli.ExitOK {
				t.Fatalf("%v: exit %d, stderr %s", c.args, code, errOut)
			}
			golden(t, c.name, out)
		}
	})
}

// TestJSON: --json output decodes into the documented fields, with the
// values the state was made with.
func TestJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		url := memURL("json-" + t.Name())
		stop := fillMem(t, url)
		defer stop()
		decode := func(v any, args ...string) {
			t.Helper()
			out, errOut, code := run(t, append(args, "--backend", url, "--json")...)
			if code != cli.ExitOK {
				t.Fatalf("%v: exit %d: %s", args, code, errOut)
			}
			if err := json.Unmarshal([]byte(out), v); err != nil {
				t.Fatalf("%v: %v in %s", args, err, out)
			}
		}
		var locks []map[string]any
		decode(&locks, "locks", "orders/")
		if len(locks) != 2 || locks[0]["key"] != "orders/42" || locks[0]["owner"] != "host-a" || locks[0]["remaining_ms"] != 27000.0 {
			t.Fatalf("locks %v", locks)
		}
		var shared []ops.Grant
		decode(&shared, "locks", "config")
		if len(shared) != 1 || shared[0].Shares != 2 || !slices.Equal(shared[0].Owners, []string{"host-a", "host-b"}) || shared[0].RemainingMS != 37000 {
			t.Fatalf("a key held shared by two hosts: %+v", shared)
		}
		var group []ops.Grant
		decode(&group, "locks", "transfer/")
		if len(group) != 2 || group[0].Group == "" || group[0].Group != group[1].Group || group[0].Token == group[1].Token {
			t.Fatalf("an all-of grant of two keys: %+v", group)
		}
		var sem ops.Semaphore
		decode(&sem, "semaphore", "db")
		if sem.Size != 3 || sem.Held != 2 || len(sem.Slots) != 3 || sem.Slots[2].Grant.Owner != "host-b" || sem.Slots[1].Held {
			t.Fatalf("semaphore %+v", sem)
		}
		var l ops.Leader
		decode(&l, "leader", "billing")
		if l.Owner != "host-a" || l.Term == 0 || l.Since == nil {
			t.Fatalf("leader %+v", l)
		}
		var lm map[string]any
		decode(&lm, "leader", "billing")
		if _, old := lm["identity"]; lm["owner"] != "host-a" || old {
			t.Fatalf("leader JSON %v, want the field \"owner\"", lm)
		}
		var ts []ops.Timer
		decode(&ts, "timers")
		if len(ts) != 1 || ts[0].Name != "reports" || ts[0].ClaimedBy != "host-b" || ts[0].LastTick.Unix() != 946684800 || len(ts[0].Running) != 1 {
			t.Fatalf("timers %+v", ts)
		}
		var js ops.Jobs
		decode(&js, "jobs")
		if js.Counts != (ops.Counts{Tracked: 2, Expired: 1, Dead: 1}) || len(js.InFlight) != 1 || js.InFlight[0].ID != "job-1" ||
			len(js.Expired) != 1 || js.Expired[0].ID != "expired-1" || len(js.Dead) != 1 || js.Dead[0].Attempt != 5 {
			t.Fatalf("jobs %+v", js)
		}
	})
}
