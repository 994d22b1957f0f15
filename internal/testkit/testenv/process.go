package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	readyTimeout = 30 * time.Second        // how long a server may take to answer
	probeTimeout = 2 * time.Second         // one readiness probe
	pollInterval = 25 * time.Millisecond   // between readiness probes
	stopTimeout  = 15 * time.Second        // from the stop signal to SIGKILL
	tempPrefix   = "leasehold-testenv-"    // + pid + "-" + kind + "-" + random
	logStartMark = "--- testenv: starting" // written to a log before each start
)

var (
	errExited    = errors.New("server process exited")
	errPortInUse = errors.New("port already in use")
)

// proc is one server process (a Redis, a postmaster, one etcd member): the
// core that starts it, captures its output, waits until it answers and stops
// it, the same for every kind.
type proc struct {
	kind    *kind
	name    string   // for messages, e.g. "Redis 127.0.0.1:40001"
	argv    []string // argv[0] is the binary's path
	env     []string // added to os.Environ()
	dir     string   // working directory
	logPath string   // stdout and stderr, appended across starts
	cred    *syscall.Credential
	target  string // what kind.probe talks to
	port    int    // the loopback TCP port it listens on (0: not checked)

	mu      sync.Mutex
	cmd     *exec.Cmd     // nil when stopped
	exited  chan struct{} // closed once cmd exited and was reaped
	reaping bool          // cmd exited; its pid may be reaped at any moment
	waitErr error
}

// command builds a command whose process is in its own process group and gets
// SIGKILL when the test binary dies.
func command(argv []string, dir string, cred *syscall.Credential) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
	return cmd
}

// run runs a one-shot command (initdb, cp) to completion.
func run(argv []string, dir string, cred *syscall.Credential) error {
	out, err := command(argv, dir, cred).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tail(out))
	}
	return nil
}

// start starts the process unless it is running; it does not wait for it
// to answer.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.exited: // it died by itself: start it again
		default:
			return nil
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "%s %s\n", logStartMark, strings.Join(p.argv, " "))
	cmd := command(p.argv, p.dir, p.cred)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.exited, p.reaping, p.waitErr = cmd, make(chan struct{}), false, nil
	go func() {
		// The watcher lives as long as the process, not as the caller: it
		// must not carry the caller's profiler labels, by which a test
		// (chaos's goroutine check) counts the goroutines it started and
		// that are still running.
		pprof.SetGoroutineLabels(context.Background())
		p.watch(cmd, p.exited)
	}()
	return nil
}

// watch waits for the process to exit, kills whatever it left in its process
// group, and reaps it. The group is signalled before the leader is reaped: the
// unreaped leader keeps the group's id from being reused, so the signal can
// only reach processes this package started.
func (p *proc) watch(cmd *exec.Cmd, exited chan struct{}) {
	pid := cmd.Process.Pid
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
	for errors.Is(err, unix.EINTR) {
		err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
	}
	p.mu.Lock()
	p.reaping = true
	if err == nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	p.mu.Unlock()
	werr := cmd.Wait()
	p.mu.Lock()
	p.waitErr = werr
	p.mu.Unlock()
	close(exited)
}

// pid is the process's id while it runs and has not been reaped, else 0.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.reaping {
		return 0
	}
	return p.cmd.Process.Pid
}

// running reports whether the process is started and has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends the kind's stop signal, escalates to SIGKILL after stopTimeout,
// and waits until the process is gone. Stopping a stopped process is a no-op.
func (p *proc) stop() error { return p.stopWith(p.kind.stopSig) }

// stopWith is stop with the signal sig.
func (p *proc) stopWith(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig) // os.ErrProcessDone once exited
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, cmd.Process.Pid)
		}
	}
	p.mu.Lock()
	if p.cmd == cmd {
		p.cmd = nil
	}
	p.mu.Unlock()
	return nil
}

// waitReady waits until the started process answers its kind's probe.
func (p *proc) waitReady() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	err := poll(p.kind.probe, p.target, exited)
	if err == nil && p.port != 0 && !listensOn(cmd.Process.Pid, p.port) {
		// Another test's server took the port between freePorts and our
		// start, and answered the probe; ours fails to bind it.
		return fmt.Errorf("%w: %s: another process answers on port %d", errPortInUse, p.name, p.port)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errExited):
		p.mu.Lock()
		werr := p.waitErr
		p.mu.Unlock()
		log := p.logTail()
		err = fmt.Errorf("%s exited before answering (%v); log %s:\n%s", p.name, werr, p.logPath, log)
		if strings.Contains(strings.ToLower(log), "address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return err
	default:
		return fmt.Errorf("%s did not answer within %v: %v; log %s:\n%s", p.name, readyTimeout, err, p.logPath, p.logTail())
	}
}

// poll probes target until it answers, for at most readyTimeout. It returns
// errExited if exited is closed first (a nil channel never is).
func poll(probe func(context.Context, string) error, target string, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		probeDeadline := time.Now().Add(probeTimeout)
		if probeDeadline.After(deadline) {
			probeDeadline = deadline
		}
		ctx, cancel := context.WithDeadline(context.Background(), probeDeadline)
		err := probe(ctx, target)
		cancel()
		if err == nil {
			select {
			case <-exited: // something else answered on our port
				return errExited
			default:
				return nil
			}
		}
		if !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-exited:
			return errExited
		case <-tick.C:
		}
	}
}

// logTail returns the end of the log written since the last start.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if i := bytes.LastIndex(b, []byte(logStartMark)); i >= 0 {
		b = b[i:]
	}
	return tail(b)
}

// tail returns the last lines of out, at most about 4 KiB.
func tail(out []byte) string {
	const maxBytes, maxLines = 4096, 40
	out = bytes.TrimRight(out, "\n")
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return "\t" + strings.Join(lines, "\n\t")
}

// freePorts returns n distinct free loopback ports. They are free when
// returned; a server that loses the race for one fails with errPortInUse and
// is started again on fresh ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close() // held until all n are chosen, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lookPath finds a binary on PATH.
func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH", name)
	}
	return path, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

var sweepOnce sync.Once

// makeTempDir makes a directory for one server or template. Its name carries
// this process's pid so that a later run can remove it if this process dies
// without cleaning up.
func makeTempDir(what string) (string, error) {
	sweepOnce.Do(sweepStale)
	return os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", tempPrefix, os.Getpid(), what))
}

// sweepStale removes directories made by makeTempDir in test binaries that
// are no longer running.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), tempPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) { // signal 0 only checks existence
			_ = os.RemoveAll(dir)
		}
	}
}
