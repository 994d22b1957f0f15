package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/cli"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
)

const childEnv = "LEASEHOLD_CLI_CHILD"

func TestMain(m *testing.M) {
	childproc.Main(childEnv, holder)
	testenv.Main(m)
}

// holder is the child process: on the backend of its environment it holds
// the key CLI_KEY, a slot of semaphore CLI_KEY and the leadership of
// election CLI_KEY, prints "READY <owner> <token of the key>", and keeps
// them until its stdin closes.
func holder() error {
	l, err := backends.FromEnv()
	if err != nil {
		return err
	}
	ctx := context.Background()
	key := os.Getenv("CLI_KEY")
	h, err := l.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		return err
	}
	sem, err := semaphore.New(l, key, 2)
	if err != nil {
		return err
	}
	if _, err := sem.TryAcquire(ctx, time.Minute); err != nil {
		return err
	}
	elected := make(chan struct{})
	go func() {
		_ = leader.Run(ctx, l, key, func(ctx context.Context) error {
			close(elected)
			<-ctx.Done()
			return nil
		})
	}()
	<-elected
	fmt.Println("READY", l.(lock.Owned).Owner(), h.Token())
	_, _ = os.Stdin.Read(make([]byte, 1)) // until the parent ends
	return nil
}

// backendURL is the URL of the test server behind b, as an operator
// would pass it.
func backendURL(t *testing.T, b backends.Backend) string {
	switch b.Name {
	case "redis":
		return "redis://" + testenv.Redis(t).Addr()
	case "postgres":
		return testenv.Postgres(t).DSN()
	case "etcd":
		return "etcd://" + strings.Join(testenv.Etcd(t).Endpoints(), ",")
	}
	t.Fatalf("no URL for %s", b.Name)
	return ""
}

func decodeJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := run(t, append(args, "--json")...)
	if code != cli.ExitOK {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v: %v in %s", args, err, out)
	}
}

// TestAgainstServers: on each real server, what a child process holds is
// what the CLI reports (JSON decoded and checked); release needs --force,
// then frees the key, then finds nothing (exit 3).
func TestAgainstServers(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		url := backendURL(t, b)
		key := fmt.Sprintf("cli-test-%s-%d", b.Name, time.Now().UnixNano())
		child := childproc.Start(t, append(b.Env, childEnv+"=1", "CLI_KEY="+key)...)
		var owner string
		var token uint64
		if _, err := fmt.Sscanf(child.Expect(t, "READY", 30*time.Second), "READY %s %d", &owner, &token); err != nil {
			t.Fatal(err)
		}
		var locks []ops.Grant
		decodeJSON(t, &locks, "locks", key, "--backend", url)
		if len(locks) != 1 || locks[0].Key != key || locks[0].Owner != owner || locks[0].Token != token || locks[0].RemainingMS <= 0 || locks[0].RemainingMS > 60000 {
			t.Fatalf("locks %+v, want %s held by %s with token %d", locks, key, owner, token)
		}
		var sem ops.Semaphore
		decodeJSON(t, &sem, "semaphore", key, "--backend", url)
		if sem.Size != 2 || sem.Held != 1 || len(sem.Slots) != 2 {
			t.Fatalf("semaphore %+v, want 1 of 2 held", sem)
		}
		for _, s := range sem.Slots {
			if s.Held && s.Grant.Owner != owner {
				t.Fatalf("slot %+v, want held by %s", s, owner)
			}
		}
		var l ops.Leader
		decodeJSON(t, &l, "leader", key, "--backend", url)
		if l.Name != key || l.Owner != owner || l.Term == 0 {
			t.Fatalf("leader %+v, want %s", l, owner)
		}
		_, errOut, code := run(t, "release", key, "--backend", url)
		if code != cli.ExitUsage || !strings.Contains(errOut, "--force is required") || !strings.Contains(errOut, owner) {
			t.Fatalf("release without --force: exit %d, %q", code, errOut)
		}
		if _, errOut, code := run(t, "release", key, "--force", "--backend", url); code != cli.ExitOK {
			t.Fatalf("release --force: exit %d, %s", code, errOut)
		}
		decodeJSON(t, &locks, "locks", key, "--backend", url)
		if len(locks) != 0 {
			t.Fatalf("after release --force: %+v", locks)
		}
		if _, errOut, code := run(t, "release", key, "--force", "--backend", url); code != cli.ExitNotFound || !strings.Contains(errOut, "not held") {
			t.Fatalf("release of a free key: exit %d, %q", code, errOut)
		}
		if _, _, code := run(t, "leader", "no-such-election", "--backend", url); code != cli.ExitNotFound {
			t.Fatalf("leader of an election without one: exit %d, want %d", code, cli.ExitNotFound)
		}
	})
}

// TestRetryThroughTheCLI: on the Redis and PostgreSQL registries, a dead
// job retried with 'leasehold jobs retry' leaves the dead set, and the
// application's Runner's recovery scan requeues it through its Requeue.
func TestRetryThroughTheCLI(t *testing.T) {
	for _, b := range []func(testing.TB) backends.Backend{backends.Redis, backends.Postgres} {
		b := b(t)
		t.Run(b.Name, func(t *testing.T) {
			url := backendURL(t, b)
			ns := fmt.Sprintf("cli_%s_%d", b.Name, time.Now().UnixNano())
			reg, closeReg, err := ops.OpenRegistry(t.Context(), url, ns, ns)
			if err != nil {
				t.Fatal(err)
			}
			defer closeReg()
			var mu sync.Mutex
			var requeued []jobs.Job
			record := func(ctx context.Context, j jobs.Job, delay time.Duration) error {
				mu.Lock()
				defer mu.Unlock()
				requeued = append(requeued, j)
				return nil
			}
			r, err := jobs.NewRunner(reg, b.New(t), record, jobs.WithMaxRetries(0))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if _, err := reg.Track(ctx, jobs.Job{ID: "poison", Payload: []byte("p")}, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			flags := []string{"--backend", url, "--namespace", ns, "--table", ns}
			var st ops.Jobs
			for deadline := time.Now().Add(10 * time.Second); st.Counts.Dead == 0; { // the scan buries it (MaxRetries 0)
				if time.Now().After(deadline) {
					t.Fatalf("not buried: %+v", st)
				}
				r.Scan(ctx)
				decodeJSON(t, &st, append([]string{"jobs"}, flags...)...)
			}
			if len(st.Dead) != 1 || st.Dead[0].ID != "poison" {
				t.Fatalf("dead %+v", st.Dead)
			}
			if _, errOut, code := run(t, append([]string{"jobs", "purge", "poison"}, flags...)...); code != cli.ExitUsage || !strings.Contains(errOut, "--yes") {
				t.Fatalf("purge without --yes: exit %d, %q", code, errOut)
			}
			if _, errOut, code := run(t, append([]string{"jobs", "retry", "poison"}, flags...)...); code != cli.ExitOK {
				t.Fatalf("retry: exit %d, %s", code, errOut)
			}
			decodeJSON(t, &st, append([]string{"jobs"}, flags...)...)
			if st.Counts.Dead != 0 || st.Counts.Tracked != 1 {
				t.Fatalf("after retry: %+v, want 1 tracked and none dead", st.Counts)
			}
			// MaxRetries 0 would bury it again: the application's runner
			// here allows a retry.
			r2, err := jobs.NewRunner(reg, b.New(t), record, jobs.WithMaxRetries(1))
			if err != nil {
				t.Fatal(err)
			}
			if n := r2.Scan(ctx); n != 1 {
				t.Fatalf("scan after retry recovered %d, want 1", n)
			}
			mu.Lock()
			got := requeued
			mu.Unlock()
			if len(got) != 1 || got[0].ID != "poison" || string(got[0].Payload) != "p" {
				t.Fatalf("requeued %+v, want poison", got)
			}
			if _, errOut, code := run(t, append([]string{"jobs", "retry", "poison"}, flags...)...); code != cli.ExitNotFound {
				t.Fatalf("retry of a job not dead: exit %d, %s", code, errOut)
			}
		})
	}
}

// TestUsageAndErrors: exit codes and messages that say what to do.
func TestUsageAndErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		say  string
	}{
		{[]string{"frobnicate"}, cli.ExitUsage, "unknown command"},
		{[]string{"locks", "--backend", ""}, cli.ExitUsage, "pass --backend URL"},
		{[]string{"locks", "--backend", "gopher://x"}, cli.ExitUsage, "not one of"},
		{[]string{"semaphore", "--backend", "mem://u"}, cli.ExitUsage, "usage: leasehold semaphore NAME"},
		{[]string{"jobs", "retry", "x", "--backend", "mem://u"}, cli.ExitNotFound, "no dead job"},
		{[]string{"jobs", "--backend", "etcd://127.0.0.1:1", "--timeout", "1s"}, cli.ExitUsage, "etcd has no jobs registry"},
		{[]string{"locks", "--backend", "redis://127.0.0.1:1", "--timeout", "2s"}, cli.ExitFailed, "Is the backend up"},
		{[]string{"dashboard", "--addr", "0.0.0.0:0", "--backend", "mem://u"}, cli.ExitUsage, "--allow-remote"},
	} {
		t.Setenv("LEASEHOLD_BACKEND", "")
		_, errOut, code := run(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.say) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, errOut, c.code, c.say)
		}
	}
	if out, _, code := run(t, "--help"); code != cli.ExitOK || !strings.Contains(out, "Exit codes") {
		t.Errorf("--help: exit %d, %q", code, out)
	}
}
