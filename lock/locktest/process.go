package locktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/lock"
)

// Process faults: a holder runs in a child process (the test binary itself,
// re-executed) so that it can be killed with SIGKILL or paused with SIGSTOP
// like a real crashed or stalled host.
//
// The child speaks a line protocol on stdin/stdout:
//
//	child:  ACQUIRED <token>        after lock.Acquire and lock.Keep
//	parent: WRITE                   the child answers WRITE <token>: it
//	                                writes to the parent's fenced resource
//	child:  LOST <cause>            when its lease context ends with ErrLost
//	parent: RELEASE                 the child answers RELEASED ok|lost|error <msg>
//	                                and exits

const (
	holderEnv = "LOCKTEST_HOLDER"
	keyEnv    = "LOCKTEST_HOLDER_KEY"
	ttlEnv    = "LOCKTEST_HOLDER_TTL"
	// warmEnv asks the child to take and release another key a few times
	// before it blocks, as a long-running process would have: connections
	// made, statements prepared and planned, server caches warm.
	warmEnv = "LOCKTEST_HOLDER_WARM"
)

// HolderMain is the child side of the process-fault tests. Call it first in
// the TestMain of a backend's test package; it returns at once unless the
// process was started as a holder, in which case it runs the holder and
// exits. newLock connects to the same server as the parent (through the
// environment the parent passed, see internal/testkit/testenv).
//
//	func TestMain(m *testing.M) {
//		locktest.HolderMain(func() (lock.Lock, error) { return connect() })
//		os.Exit(m.Run())
//	}
func HolderMain(newLock func() (lock.Lock, error)) {
	if os.Getenv(holderEnv) == "" {
		return
	}
	if err := holder(newLock, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stdout, "ERROR", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func holder(newLock func() (lock.Lock, error), in io.Reader, out io.Writer) error {
	ttl, err := time.ParseDuration(os.Getenv(ttlEnv))
	if err != nil {
		return err
	}
	l, err := newLock()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if os.Getenv(warmEnv) != "" {
		for range 5 {
			h, err := l.TryAcquire(ctx, os.Getenv(keyEnv)+"/warm-up", ttl)
			if err != nil {
				return err
			}
			if err := h.Release(ctx); err != nil {
				return err
			}
		}
	}
	// Block the way callers do: in the backend's queue when it has one,
	// else on its Waiter; say BLOCKED once the first attempt has failed.
	w, _ := l.(lock.Waiter)
	ob := &observed{Lock: l, Waiter: w, failed: make(chan struct{})}
	var blocking lock.Lock = ob
	if q, ok := l.(lock.Queue); ok {
		blocking = l
		go func() {
			for ctx.Err() == nil {
				if n, err := q.Waiting(ctx, os.Getenv(keyEnv)); err == nil && n > 0 {
					ob.once.Do(func() { close(ob.failed) })
					return
				}
				time.Sleep(time.Millisecond) // polling with a bound: ctx
			}
		}()
	}
	go func() {
		select {
		case <-ob.failed:
			fmt.Fprintln(out, "BLOCKED")
		case <-ctx.Done():
		}
	}()
	h, err := lock.Acquire(ctx, blocking, os.Getenv(keyEnv), ttl)
	acquiredAt := time.Now()
	if err != nil {
		return err
	}
	lease, err := lock.Keep(context.Background(), h, ttl)
	if err != nil {
		return err
	}
	lines := make(chan string, 16)
	say := func(format string, args ...any) { lines <- fmt.Sprintf(format, args...) }
	done := make(chan struct{})
	go func() {
		for l := range lines {
			fmt.Fprintln(out, l)
		}
		close(done)
	}()
	say("ACQUIRED %d %d", h.Token(), acquiredAt.UnixNano())
	go func() {
		<-lease.Context().Done()
		if err := lease.Err(); err != nil {
			say("LOST %s", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}()
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "WRITE":
			say("WRITE %d", h.Token())
		case "RELEASE":
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := lease.Release(rctx)
			cancel()
			switch {
			case err == nil:
				say("RELEASED ok")
			case errors.Is(err, lock.ErrLost):
				say("RELEASED lost")
			default:
				say("RELEASED error %s", strings.ReplaceAll(err.Error(), "\n", " "))
			}
			close(lines)
			<-done
			return nil
		}
	}
	return sc.Err()
}

// Holder is the parent's view of a holder child process.
type Holder struct {
	t        testing.TB
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	token    uint64
	blocked  chan struct{}
	acquired chan string
	lost     chan string
	other    chan string
}

// StartHolder starts a child that acquires key for ttl (blocking for up to
// a minute) and keeps it. env is added to the child's environment so that
// it finds the parent's server (testenv's Server.Env). The child is killed
// at the end of the test.
func StartHolder(t testing.TB, env []string, key string, ttl time.Duration) *Holder {
	t.Helper()
	h := startChild(t, env, key, ttl)
	h.waitAcquired(time.Minute)
	return h
}

// StartBlockedHolder starts a child like StartHolder while the key is held
// elsewhere, and returns once the child's first attempt has failed: the
// child is then blocked in lock.Acquire. Acquired waits for its grant.
func StartBlockedHolder(t testing.TB, env []string, key string, ttl time.Duration) *Holder {
	t.Helper()
	h := startChild(t, env, key, ttl)
	select {
	case <-h.blocked:
	case line := <-h.acquired:
		t.Fatalf("holder child acquired %q (%s) while it was held elsewhere", key, line)
	case line, ok := <-h.other:
		t.Fatalf("holder child did not start waiting: %q (exited: %v)", line, !ok)
	case <-time.After(time.Minute):
		t.Fatalf("holder child did not try %q within a minute", key)
	}
	return h
}

// Acquired waits up to d for a blocked child's grant and returns the wall
// clock time at which the child held it.
func (h *Holder) Acquired(d time.Duration) time.Time {
	h.t.Helper()
	return h.waitAcquired(d)
}

func startChild(t testing.TB, env []string, key string, ttl time.Duration) *Holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), holderEnv+"=1", keyEnv+"="+key, ttlEnv+"="+ttl.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &Holder{t: t, cmd: cmd, stdin: stdin, lost: make(chan string, 1), other: make(chan string, 16),
		blocked: make(chan struct{}, 1), acquired: make(chan string, 1)}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "BLOCKED":
				h.blocked <- struct{}{}
			case strings.HasPrefix(line, "ACQUIRED "):
				h.acquired <- line
			case strings.HasPrefix(line, "LOST "):
				h.lost <- strings.TrimPrefix(line, "LOST ")
			default:
				h.other <- line
			}
		}
		close(h.other)
	}()
	return h
}

func (h *Holder) waitAcquired(d time.Duration) time.Time {
	h.t.Helper()
	select {
	case line := <-h.acquired:
		var ns int64
		if _, err := fmt.Sscanf(line, "ACQUIRED %d %d", &h.token, &ns); err != nil {
			h.t.Fatalf("holder: %q: %v", line, err)
		}
		return time.Unix(0, ns)
	case line, ok := <-h.other:
		h.t.Fatalf("holder child did not acquire: %q (exited: %v)", line, !ok)
	case <-time.After(d):
		h.t.Fatalf("holder child did not acquire within %v", d)
	}
	return time.Time{}
}

// Token is the child's fencing token.
func (h *Holder) Token() uint64 { return h.token }

// Signal sends sig to the child (SIGKILL, SIGSTOP, SIGCONT).
func (h *Holder) Signal(sig syscall.Signal) {
	h.t.Helper()
	if err := h.cmd.Process.Signal(sig); err != nil {
		h.t.Fatalf("signal %v: %v", sig, err)
	}
}

func (h *Holder) send(cmd string, d time.Duration) string {
	h.t.Helper()
	if _, err := io.WriteString(h.stdin, cmd+"\n"); err != nil {
		h.t.Fatalf("holder: %s: %v", cmd, err)
	}
	select {
	case line, ok := <-h.other:
		if !ok {
			h.t.Fatalf("holder exited before answering %s", cmd)
		}
		return line
	case <-time.After(d):
		h.t.Fatalf("holder did not answer %s within %v", cmd, d)
	}
	return ""
}

// Write makes the child write to fence with its token, as a holder that
// believes it still holds the key would, and returns the fence's verdict.
func (h *Holder) Write(fence *lock.Fence) error {
	h.t.Helper()
	line := h.send("WRITE", 30*time.Second)
	tok, err := strconv.ParseUint(strings.TrimPrefix(line, "WRITE "), 10, 64)
	if err != nil {
		h.t.Fatalf("holder: %q", line)
	}
	return fence.Do(tok, nil)
}

// WaitLost waits up to d for the child to report its lease lost.
func (h *Holder) WaitLost(d time.Duration) (cause string, ok bool) {
	select {
	case c := <-h.lost:
		return c, true
	case <-time.After(d):
		return "", false
	}
}

// Release asks the child to release and returns its answer: "ok", "lost"
// or "error <msg>".
func (h *Holder) Release() string {
	h.t.Helper()
	return strings.TrimPrefix(h.send("RELEASE", 30*time.Second), "RELEASED ")
}

// RunProcessFaults runs the process-fault tests: a holder killed with
// SIGKILL frees its key within ttl + slack; a holder stopped with SIGSTOP
// past its ttl loses the key to a successor with a larger token, and when it
// is continued its write to the fenced resource is refused, it learns of
// the loss, and its Release returns ErrLost without touching the successor.
// env is what a child needs to find the server; the test package's TestMain
// must call HolderMain.
func RunProcessFaults(t *testing.T, newLock Factory, env []string, opts ...Option) {
	c := defaults()
	for _, o := range opts {
		o(&c)
	}
	if c.minTTL > c.ttl {
		c.ttl = c.minTTL
	}
	ttl := max(c.ttl, 500*time.Millisecond) // the child's start-up must not eat the ttl
	s := &suite{cfg: c, newLock: newLock, prefix: "locktest/" + randomID() + "/"}

	t.Run("SIGKILL", func(t *testing.T) {
		t.Parallel()
		key := s.key(t, "k")
		child := StartHolder(t, env, key, ttl)
		child.Signal(syscall.SIGKILL)
		killed := time.Now()
		h := acquireWithin(t, newLock(t), key, c.longTTL, ttl+c.slack, "the key of a SIGKILLed holder")
		defer h.Release(context.Background())
		t.Logf("acquired %v after SIGKILL (ttl %v)", time.Since(killed).Round(time.Millisecond), ttl)
		if h.Token() <= child.Token() {
			t.Fatalf("successor token %d, want > %d", h.Token(), child.Token())
		}
	})

	t.Run("SIGSTOP", func(t *testing.T) {
		t.Parallel()
		key := s.key(t, "k")
		var fence lock.Fence
		child := StartHolder(t, env, key, ttl)
		if err := child.Write(&fence); err != nil {
			t.Fatalf("the holder's write while it holds the key: %v", err)
		}
		child.Signal(syscall.SIGSTOP)
		l := newLock(t)
		h := acquireWithin(t, l, key, c.longTTL, ttl+c.slack, "the key of a SIGSTOPped holder")
		defer h.Release(context.Background())
		if h.Token() <= child.Token() {
			t.Fatalf("successor token %d, want > %d", h.Token(), child.Token())
		}
		if err := fence.Do(h.Token(), nil); err != nil {
			t.Fatalf("successor's write: %v", err)
		}
		child.Signal(syscall.SIGCONT)
		if err := child.Write(&fence); !errors.Is(err, lock.ErrStaleToken) {
			t.Fatalf("the resumed holder's write: %v, want ErrStaleToken", err)
		}
		if cause, ok := child.WaitLost(ttl + c.slack); !ok {
			t.Fatalf("the resumed holder was not told of its loss within ttl + slack")
		} else {
			t.Logf("resumed holder: %s", cause)
		}
		if got := child.Release(); got != "lost" {
			t.Fatalf("the resumed holder's Release: %q, want lost", got)
		}
		expectNotAcquired(t, newLock(t), key, c.ttl, "the successor must keep the key after the old holder's Release")
		if err := h.Extend(ctxFor(t, 10*time.Second), c.longTTL); err != nil {
			t.Fatalf("successor's Extend: %v", err)
		}
	})
}
