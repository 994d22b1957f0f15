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

// SetReplyDelay delays the server's replies by a latency: the requests
// reach the server at once, each reply comes d after the server sent it,
// and two replies in a row are not delayed one after the other.
func TestReplyDelay(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	received := make(chan time.Time, 2)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			received <- time.Now()
			_, _ = c.Write(append(sc.Bytes(), '\n'))
		}
	}()
	p := faultproxy.Start(t, ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const d = 500 * time.Millisecond
	p.SetReplyDelay(d)
	sent := time.Now()
	if _, err := c.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	got := <-received
	if _, err := c.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"a\n", "b\n"} {
		line, err := r.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("reply %q, %v; want %q", line, err, want)
		}
	}
	if at := time.Now(); at.Sub(got) < d {
		t.Fatalf("the replies came %v after the server sent the first; want the %v delay", at.Sub(got), d)
	} else if at.Sub(sent) >= 2*d {
		t.Fatalf("the second reply came %v after the first request: the delays added up", at.Sub(sent))
	}
	if got.Sub(sent) >= d {
		t.Fatalf("the request reached the server after %v: only replies are delayed", got.Sub(sent))
	}
}
