package leader_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
	"github.com/leasehold-go/leasehold/leader"
	"github.com/leasehold-go/leasehold/lock"
)

// A candidate child process runs leader.Run. Elected, it writes its term to
// the election's fenced resource on the backend's server (backends.Fenced:
// the server refuses a term below one it has seen) and reports
// "ELECTED <term> <verdict>"; demoted, "DEMOTED <term> <cause>". On stdin,
// "WRITE" makes it write its latest term again — as a leader that believes
// it may still write would — and answer "WRITE <term> <verdict>"; "QUIT"
// cancels Run's context (graceful shutdown). A verdict is "accepted",
// "refused" or "error:<message>".

const childEnv = "LEADER_CHILD"

var processOpts = []leader.Option{leader.WithTTL(time.Second), leader.WithRenewInterval(300 * time.Millisecond), leader.WithRetryInterval(500 * time.Millisecond)}

const lease, retry = time.Second, 500 * time.Millisecond

func childMain() {
	if os.Getenv(childEnv) == "" {
		return
	}
	l, err := backends.FromEnv()
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	fence, err := backends.FenceFromEnv(os.Getenv("LEADER_NAME"))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	write := func(term uint64) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		switch ok, err := fence.Write(ctx, term); {
		case err != nil:
			return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
		case ok:
			return "accepted"
		default:
			return "refused"
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan string, 16)
	var term uint64
	termc := make(chan uint64, 1)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "WRITE":
				select {
				case term = <-termc:
				default:
				}
				out <- fmt.Sprintf("WRITE %d %s", term, write(term))
			case "QUIT":
				cancel()
			}
		}
	}()
	go func() {
		for line := range out {
			fmt.Println(line)
		}
	}()
	_ = leader.Run(ctx, l, os.Getenv("LEADER_NAME"), func(ctx context.Context) error {
		t, _ := lock.TokenFrom(ctx)
		select {
		case <-termc:
		default:
		}
		termc <- t
		out <- fmt.Sprintf("ELECTED %d %s", t, write(t))
		<-ctx.Done()
		out <- fmt.Sprintf("DEMOTED %d %s", t, strings.ReplaceAll(fmt.Sprint(context.Cause(ctx)), "\n", " "))
		return nil
	}, processOpts...)
	out <- "EXITED"
	time.Sleep(100 * time.Millisecond) // let the printer drain before exit
	os.Exit(0)
}

type candidate struct {
	i int
	*childproc.Proc
}

type event struct {
	who  int
	line string
	at   time.Time
}

func startCandidates(t testing.TB, b backends.Backend, name string, n int) ([]*candidate, chan event) {
	events := make(chan event, 256)
	var cs []*candidate
	for i := range n {
		p := childproc.Start(t, append(b.Env, childEnv+"=1", "LEADER_NAME="+name)...)
		go func() {
			for line := range p.Lines {
				events <- event{i, line, time.Now()}
			}
		}()
		cs = append(cs, &candidate{i, p})
	}
	return cs, events
}

// next waits up to d for an event whose line starts with prefix, from any
// candidate accepted by from; other events are kept in seen.
func next(t testing.TB, events chan event, prefix string, d time.Duration, from func(int) bool) event {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e := <-events:
			if strings.HasPrefix(e.line, "ERROR") {
				t.Fatalf("candidate %d: %s", e.who, e.line)
			}
			if strings.HasPrefix(e.line, prefix) && from(e.who) {
				return e
			}
			if strings.HasPrefix(e.line, "ELECTED") {
				t.Fatalf("unexpected election of candidate %d (%s) while waiting for %q", e.who, e.line, prefix)
			}
		case <-deadline:
			t.Fatalf("no %q within %v", prefix, d)
		}
	}
}

func termOf(t testing.TB, line string) uint64 {
	var term uint64
	if _, err := fmt.Sscanf(strings.Fields(line)[1], "%d", &term); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return term
}

// verdict is the last word of an ELECTED or WRITE line: what the fenced
// resource said to the candidate's write.
func verdict(line string) string {
	f := strings.Fields(line)
	return f[len(f)-1]
}

// wrote fails unless the server accepted the write of a newly elected
// leader.
func wrote(t testing.TB, e event) {
	t.Helper()
	if v := verdict(e.line); v != "accepted" {
		t.Fatalf("candidate %d, elected (%s): its write was %s", e.who, e.line, v)
	}
}

func anyOf(ids ...int) func(int) bool {
	return func(i int) bool {
		for _, id := range ids {
			if i == id {
				return true
			}
		}
		return false
	}
}

// Three candidate processes: exactly one leads; SIGKILL of the leader → a
// new leader within lease + retry + 1 s; SIGSTOP of the leader past its
// lease → a new leader with a higher term, and on SIGCONT the old one is
// demoted and its term-stamped write is refused; a graceful shutdown hands
// over within 1 s.
func TestThreeProcesses(t *testing.T) {
	backends.Each(t, backends.Networked(t), func(t *testing.T, b backends.Backend) {
		name := fmt.Sprintf("procs-%s-%d", t.Name(), time.Now().UnixNano()) // the fenced resource too: new per run
		cs, events := startCandidates(t, b, name, 3)
		observer := b.New(t)

		e1 := next(t, events, "ELECTED", 30*time.Second, anyOf(0, 1, 2))
		t1 := termOf(t, e1.line)
		wrote(t, e1)
		// Exactly one leads: nobody else is elected while it renews.
		select {
		case e := <-events:
			t.Fatalf("while candidate %d leads: candidate %d says %q", e1.who, e.who, e.line)
		case <-time.After(3 * lease):
		}
		if term, ok, err := leader.Observe(t.Context(), observer, name); err != nil || !ok || term.Term != t1 {
			t.Fatalf("Observe = %+v %v %v, want term %d", term, ok, err, t1)
		}

		// SIGKILL of the leader.
		others := []int{}
		for i := range 3 {
			if i != e1.who {
				others = append(others, i)
			}
		}
		cs[e1.who].Signal(t, syscall.SIGKILL)
		killed := time.Now()
		e2 := next(t, events, "ELECTED", lease+retry+time.Second, anyOf(others...))
		t2 := termOf(t, e2.line)
		t.Logf("failover after SIGKILL: %v (lease %v)", e2.at.Sub(killed).Round(time.Millisecond), lease)
		if t2 <= t1 {
			t.Fatalf("term %d after %d", t2, t1)
		}
		wrote(t, e2)

		// SIGSTOP of the new leader past its lease.
		third := others[0]
		if third == e2.who {
			third = others[1]
		}
		cs[e2.who].Signal(t, syscall.SIGSTOP)
		stopped := time.Now()
		e3 := next(t, events, "ELECTED", lease+retry+time.Second, anyOf(third))
		t3 := termOf(t, e3.line)
		t.Logf("failover after SIGSTOP: %v", e3.at.Sub(stopped).Round(time.Millisecond))
		if t3 <= t2 {
			t.Fatalf("term %d after %d", t3, t2)
		}
		wrote(t, e3)
		cs[e2.who].Signal(t, syscall.SIGCONT)
		cs[e2.who].Send(t, "WRITE")
		sawDemoted, sawWrite := false, false
		for !sawDemoted || !sawWrite {
			e := next(t, events, "", 2*time.Second, anyOf(e2.who))
			switch {
			case strings.HasPrefix(e.line, "DEMOTED"):
				sawDemoted = true
				if !strings.Contains(e.line, "lost") {
					t.Fatalf("the resumed leader was demoted with %q, want a loss", e.line)
				}
			case strings.HasPrefix(e.line, "WRITE"):
				sawWrite = true
				if termOf(t, e.line) != t2 || verdict(e.line) != "refused" {
					t.Fatalf("the resumed leader of term %d wrote %q after term %d's write; want the server to refuse it", t2, e.line, t3)
				}
			}
		}

		// Graceful shutdown of the current leader: the resumed one takes over.
		cs[third].Send(t, "QUIT")
		quit := time.Now()
		e4 := next(t, events, "ELECTED", time.Second, anyOf(e2.who))
		t.Logf("failover after a graceful shutdown: %v", e4.at.Sub(quit).Round(time.Millisecond))
		if termOf(t, e4.line) <= t3 {
			t.Fatalf("term %s after %d", e4.line, t3)
		}
		wrote(t, e4)
	})
}
