package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// TestMain lets the test binary stand in for the program when the
// supervisor starts it again as a worker process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-worker" {
		main()
		return
	}
	testenv.Main(m)
}

func TestJobsExample(t *testing.T) {
	check(t, "mem://jobs-example-test")
}

// The same program on every backend that has a jobs registry, through
// -backend: the workers are processes there.
func TestJobsExampleOnEveryBackend(t *testing.T) {
	urls := map[string]func() string{
		"redis":    func() string { return "redis://" + testenv.Redis(t).Addr() },
		"postgres": func() string { return testenv.Postgres(t).DSN() },
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, url())
		})
	}
}

// etcd has no jobs registry: the program says so rather than running
// without one.
func TestJobsExampleRefusesEtcd(t *testing.T) {
	_, err := run(t.Context(), &bytes.Buffer{}, "etcd://127.0.0.1:2379", 3)
	if err == nil || !strings.Contains(err.Error(), "etcd has no jobs registry") {
		t.Fatalf("etcd:// gave %v, want a refusal naming the reason", err)
	}
}

// check runs the program on url and checks its outcome against the
// contract: every good job completed at least once, and a good job ran
// again only after a recovery of it (once or more); the poison job ran
// MaxRetries+1 times, killing a worker each time, and is in the dead set
// at attempt MaxRetries+1 with a history of MaxRetries+1 recoveries.
func check(t *testing.T, url string) {
	t.Helper()
	const total = 12
	var out bytes.Buffer
	res, err := run(t.Context(), &out, url, total)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("output:\n%s", out.String())
		}
	}()
	if len(res.completed) != total {
		t.Errorf("%d of %d good jobs completed", len(res.completed), total)
	}
	for id, n := range res.started {
		if id != poison && n-1 > res.recovered[id] {
			t.Errorf("%s ran %d times after %d recoveries of it", id, n, res.recovered[id])
		}
	}
	if res.started[poison] < maxRetries+1 || res.killed < maxRetries+1 {
		t.Errorf("%s started %d times and killed %d workers, want %d", poison, res.started[poison], res.killed, maxRetries+1)
	}
	if res.dead.Attempt != maxRetries+1 || len(res.dead.History) != maxRetries+1 {
		t.Errorf("%s dead at attempt %d with %d recoveries in its history, want %d", poison, res.dead.Attempt, len(res.dead.History), maxRetries+1)
	}
	for id := range res.completed {
		if id == poison {
			t.Errorf("%s completed", poison)
		}
	}
	t.Logf("%s", out.String())
}

// A good job whose context ends because it was lost (not renewed in time)
// is given up without finish, so that its registry entry expires and the
// job is recovered and runs again. (The program called finish with the
// loss as the outcome, which removed the entry: under load a job lost
// this way was never recovered, and the run ended with 11 of 12 good jobs
// completed.)
func TestALostJobIsLeftToRecovery(t *testing.T) {
	jctx, lose := context.WithCancelCause(t.Context())
	lose(lock.ErrLost)
	var said []string
	say := func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }
	finish := func(error) error {
		t.Error("finish was called for a job given up unfinished")
		return nil
	}
	goodJob(t.Context(), jctx, "job-01", finish, new(sync.Mutex), say)
	if len(said) != 1 || said[0] != "LOST job-01" {
		t.Fatalf("reported %q, want LOST job-01", said)
	}
}

// A crash (which holds steps) cannot come between a job's finish and its
// DONE: goodJob holds steps from one to the other. (A worker killed by the
// poison job right after another job's finish left that job completed in
// the registry and never reported: the run ended with 11 of 12 good jobs
// completed, 1 run in 10 under load.)
func TestAFinishedJobIsAlwaysReported(t *testing.T) {
	var steps sync.Mutex
	steps.Lock() // a crash in progress
	finished := make(chan struct{})
	var said []string
	go func() {
		defer close(finished)
		goodJob(t.Context(), t.Context(), "job-02", func(error) error { return nil }, &steps, func(format string, args ...any) {
			said = append(said, fmt.Sprintf(format, args...))
		})
	}()
	select {
	case <-finished:
		t.Fatal("the job finished while a crash held steps")
	case <-time.After(2 * work): // its work is over: it waits for steps
	}
	steps.Unlock()
	<-finished
	if len(said) != 1 || said[0] != "DONE job-02" {
		t.Fatalf("reported %q, want DONE job-02", said)
	}
}
