package faultproxy_test

import (
	"bufio"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/faultproxy"
)

// echo is a line echo server.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					_, _ = c.Write(append(sc.Bytes(), '\n'))
				}
				_ = c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, deadline time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

func TestModes(t *testing.T) {
	p := faultproxy.Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}
	p.SetDelay(100 * time.Millisecond)
	start := time.Now()
	if err := roundTrip(c, time.Second); err != nil || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("delay: %v after %v", err, time.Since(start))
	}
	p.SetDelay(0)
	p.SetMode(faultproxy.Blackhole)
	var ne net.Error
	if err := roundTrip(c, 200*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("blackhole: %v, want a timeout (no FIN, no RST)", err)
	}
	p.SetMode(faultproxy.Pass)
	p.ResetAll()
	if err := roundTrip(c, time.Second); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("reset: %v, want ECONNRESET", err)
	}
	p.Refuse(true)
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		err = roundTrip(c2, time.Second)
		c2.Close()
	}
	if err == nil {
		t.Fatal("refused: the connection worked")
	}
	p.Refuse(false)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	<-p.Schedule(faultproxy.Step{After: 10 * time.Millisecond, Do: func(p *faultproxy.Proxy) { p.SetDelay(time.Millisecond) }})
	if err := roundTrip(c3, time.Second); err != nil {
		t.Fatalf("after the schedule: %v", err)
	}
}
