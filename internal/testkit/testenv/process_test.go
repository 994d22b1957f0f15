package testenv

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

func TestListensOn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if !listensOn(os.Getpid(), port) {
		t.Errorf("listensOn(this process, %d) = false; it listens there", port)
	}
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if listensOn(other.Process.Pid, port) {
		t.Errorf("listensOn(sleep, %d) = true; this process listens there, not sleep", port)
	}
}

// The CI failure this reproduces: a Redis Cluster node lost its port to
// another test's Redis between freePorts and its start, the other Redis
// answered the readiness probe, and forming the cluster failed after 30 s
// instead of the cluster being started again on fresh ports.
func TestAServerWhosePortIsTakenIsNotReady(t *testing.T) {
	bin, err := redisKind.find()
	if err != nil {
		unavailable(t, err.Error())
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	first := redisNode(bin, t.TempDir(), ports[0])
	first.kind = redisKind
	if err := first.start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.stop() }()
	if err := first.waitReady(); err != nil {
		t.Fatal(err)
	}
	second := redisNode(bin, t.TempDir(), ports[0])
	second.kind = redisKind
	if err := second.start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.stop() }()
	if err := second.waitReady(); !errors.Is(err, errPortInUse) {
		t.Fatalf("waitReady of a Redis whose port another Redis holds = %v, want errPortInUse", err)
	}
}

// A server started from a labelled goroutine (a chaos run restarts nodes
// from its own) has its process watcher outside those labels: the
// watcher lives as long as the process, and the chaos goroutine check of
// the long failover tier counted the watchers of the nodes it had
// restarted as goroutines it leaked (TestFailoverCluster, 6 of at most 5).
func TestProcessWatcherCarriesNoLabels(t *testing.T) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("test", t.Name())))
	defer pprof.SetGoroutineLabels(context.Background())
	sleeper := &proc{kind: redisKind, name: "sleep", argv: []string{"/bin/sleep", "30"}, dir: t.TempDir()}
	sleeper.logPath = sleeper.dir + "/log"
	if err := sleeper.start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.stop() }()
	var buf bytes.Buffer
	for deadline := time.Now().Add(5 * time.Second); ; {
		buf.Reset()
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		if strings.Contains(buf.String(), "(*proc).watch") || time.Now().After(deadline) {
			break
		}
		<-time.After(10 * time.Millisecond)
	}
	for _, group := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(group, "(*proc).watch") && strings.Contains(group, t.Name()) {
			t.Fatalf("the process watcher carries the starter's labels:\n%s", group)
		}
	}
}
