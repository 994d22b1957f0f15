package testenv

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"testing"
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
