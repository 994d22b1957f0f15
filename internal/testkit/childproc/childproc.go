// Package childproc runs a test binary again as a child process — a
// simulated host that a fault test can SIGKILL, SIGSTOP and SIGCONT — and
// talks to it in lines over stdin and stdout.
//
// The child side: TestMain calls Main first, which runs the child's body
// and exits when the process was started as a child (its variable is set),
// and returns at once otherwise.
package childproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Main runs body and exits if the environment variable env is set: with
// status 0, or after printing "ERROR <err>" with status 2.
func Main(env string, body func() error) {
	if os.Getenv(env) == "" {
		return
	}
	if err := body(); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// Proc is a running child.
type Proc struct {
	Cmd   *exec.Cmd
	Lines chan string // the child's stdout, line by line; closed when it exits
	stdin io.WriteCloser
}

// Start runs the test binary (running no test) with env added to its
// environment. The child is continued and killed at the end of the test.
func Start(t testing.TB, env ...string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	p := &Proc{Cmd: cmd, Lines: make(chan string, 1024), stdin: stdin}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.Lines <- sc.Text()
		}
		close(p.Lines)
	}()
	return p
}

// Send writes a line to the child's stdin.
func (p *Proc) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("child: sending %q: %v", line, err)
	}
}

// Signal sends sig to the child.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("child: %v: %v", sig, err)
	}
}

// Expect waits up to d for a line that starts with prefix, passing over
// other lines, and returns it. An "ERROR" line or the child's exit fails
// the test.
func (p *Proc) Expect(t testing.TB, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case line, ok := <-p.Lines:
			if !ok {
				t.Fatalf("child exited before %q", prefix)
			}
			if strings.HasPrefix(line, "ERROR") {
				t.Fatalf("child: %s", line)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-deadline:
			t.Fatalf("child: no %q within %v", prefix, d)
		}
	}
}
