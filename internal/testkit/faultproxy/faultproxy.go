// Package faultproxy is a TCP proxy for fault tests: a client talks to a
// server through it, and the test can pass traffic, delay it, blackhole it
// (stop forwarding without closing anything, like a partition or a dead
// host: no FIN, no RST) or reset every connection (RST), now or on a
// schedule. It listens on loopback only.
package faultproxy

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Mode is what the proxy does with the traffic of its connections.
type Mode int

const (
	Pass      Mode = iota // forward
	Blackhole             // hold everything: neither forward nor close
)

// Proxy forwards connections from its address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	mode    Mode
	delay   time.Duration
	reply   time.Duration // latency added to the server's replies
	conns   map[*link]struct{}
	closed  bool
	refused bool
	held    int // chunks from clients that Blackhole holds
}

type link struct{ client, server net.Conn }

// Start starts a proxy to target on a free loopback port, closed at the end
// of the test.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*link]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mode = Pass
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.ResetAll()
}

// SetMode switches every connection, open or future, to m.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	p.cond.Broadcast()
}

// HeldRequests is how many chunks from clients Blackhole has held since
// the proxy started (a chunk read while it held traffic, forwarded when
// it stops): a test waits on it for a request to be on its way.
func (p *Proxy) HeldRequests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// SetDelay delays every chunk forwarded in either direction by d (0: none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// SetReplyDelay delays what the server sends by d (0: none), as a latency:
// each chunk is forwarded d after it arrived, whatever came before it, and
// requests pass at once. A request is executed on time and its reply is
// late: the fault of a grant that the client learns of after it expired.
func (p *Proxy) SetReplyDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reply = d
}

// Refuse makes the proxy reset new connections at once (true) or accept
// them again (false): a server that is down.
func (p *Proxy) Refuse(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused = refuse
}

// ResetAll resets every open connection (RST, not FIN).
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.conns = map[*link]struct{}{}
	p.mu.Unlock()
	for _, l := range links {
		reset(l.client)
		reset(l.server)
	}
}

// Conns is the number of open connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Step is one fault of a schedule: at After (from the call to Schedule), do.
type Step struct {
	After time.Duration
	Do    func(*Proxy)
}

// Schedule runs the steps in the background at their times; the returned
// channel is closed after the last one.
func (p *Proxy) Schedule(steps ...Step) <-chan struct{} {
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		for _, s := range steps {
			time.Sleep(time.Until(start.Add(s.After)))
			s.Do(p)
		}
	}()
	return done
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST
	}
	_ = c.Close()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refused := p.refused
		p.mu.Unlock()
		if refused {
			reset(c)
			continue
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	l := &link{client, server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		reset(client)
		reset(server)
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()
	go p.pipe(l, client, server, nil)
	replies := make(chan chunk, 64)
	go p.deliver(l, replies, server, client)
	p.pipe(l, server, client, replies)
}

// chunk is a reply read from the server, to be written at at.
type chunk struct {
	b  []byte
	at time.Time
}

// deliver writes the server's replies to the client at their times, and
// ends the client's side as the server's ended (EOF: FIN, else RST).
func (p *Proxy) deliver(l *link, replies <-chan chunk, server, client net.Conn) {
	failed := false
	for c := range replies {
		if c.b == nil { // the server's side ended
			if failed || c.at.IsZero() {
				reset(client)
			} else {
				_ = client.Close()
			}
			continue
		}
		if failed {
			continue
		}
		time.Sleep(time.Until(c.at))
		if _, err := client.Write(c.b); err != nil {
			failed = true
			reset(server)
		}
	}
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pipe copies from src to dst, honouring the mode and the delay; with
// replies set (the server's side), it hands the chunks to deliver instead,
// with the reply delay.
func (p *Proxy) pipe(l *link, src, dst net.Conn, replies chan<- chunk) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.mode == Blackhole && replies == nil {
				p.held++ // a request (replies go through deliver)
			}
			for p.mode == Blackhole && !p.closed {
				p.cond.Wait()
			}
			delay, reply := p.delay, p.reply
			p.mu.Unlock()
			if delay > 0 {
				time.Sleep(delay)
			}
			if replies != nil {
				replies <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(reply)}
			} else if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if replies != nil {
				var at time.Time // zero: reset
				if err == io.EOF {
					at = time.Now()
				}
				replies <- chunk{at: at}
				close(replies)
				return
			}
			if err != io.EOF {
				reset(dst)
			} else {
				_ = dst.Close()
			}
			p.mu.Lock()
			delete(p.conns, l)
			p.mu.Unlock()
			return
		}
	}
}
