package testenv

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// PeerProxies makes NewEtcd start a cluster whose members talk to each
// other through proxies in the test process (each member advertises its
// proxy's address as its peer URL), so that IsolateMember can cut a member
// off from its peers while its client port keeps answering. Linux only
// (the proxies tell which member dialed a connection from /proc).
func PeerProxies() Option { return func(c *config) { c.peerProxies = true } }

// IsolateMember cuts member i (an index into Endpoints) off from its peers
// in both directions, as a network partition would: the peer proxies
// silently drop every byte to or from it (no FIN, no RST), on the
// connections open now and on new ones, while its client port keeps
// answering. It does not wait for anything: the others elect a leader among
// themselves if it led. HealMember ends it. It needs NewEtcd with
// PeerProxies.
func (s *Server) IsolateMember(t testing.TB, i int) {
	t.Helper()
	s.control(t, "IsolateMember", func() error { return s.peerNet(i, true) })
}

// HealMember ends member i's isolation: the connections the proxies held
// silent are reset, and the members connect again.
func (s *Server) HealMember(t testing.TB, i int) {
	t.Helper()
	s.control(t, "HealMember", func() error { return s.peerNet(i, false) })
}

func (s *Server) peerNet(i int, isolate bool) error {
	if err := s.checkMember(i); err != nil {
		return err
	}
	if s.peers == nil {
		return fmt.Errorf("the %s server has no peer proxies: start it with NewEtcd(t, Members(n), PeerProxies())", s.kind.name)
	}
	s.peers.isolate(i, isolate)
	return nil
}

// peerNet is the proxies between the members of a cluster: proxy j accepts
// the connections the members dial to member j's peer URL and forwards
// them to member j's own peer port, unless member j or the member that
// dialed (found in /proc) is isolated.
type peerNet struct {
	members []*proc
	lns     []net.Listener
	targets []string // member j's own peer host:port

	mu       sync.Mutex
	isolated map[int]bool
	links    map[*peerLink]bool
	closed   bool
}

// peerLink is one connection through a proxy: from the member that dialed
// (-1: not known) to member to; silent while either end is isolated.
type peerLink struct {
	from, to       int
	client, server net.Conn // server is nil while the link was silent from the start
	silent         bool
}

// newPeerNet listens for n members' peer traffic on fresh loopback ports.
func newPeerNet(n int) (*peerNet, error) {
	pn := &peerNet{isolated: map[int]bool{}, links: map[*peerLink]bool{}}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			pn.close()
			return nil, fmt.Errorf("a peer proxy: %w", err)
		}
		pn.lns = append(pn.lns, ln)
	}
	return pn, nil
}

// addr is the address member j advertises to its peers: its proxy's.
func (pn *peerNet) addr(j int) string { return pn.lns[j].Addr().String() }

// start serves the proxies, once the members are known.
func (pn *peerNet) start(members []*proc, targets []string) {
	pn.members, pn.targets = members, targets
	for j, ln := range pn.lns {
		go pn.accept(j, ln)
	}
}

func (pn *peerNet) accept(to int, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go pn.serve(to, c)
	}
}

// serve forwards one connection to member to, or holds it silent.
func (pn *peerNet) serve(to int, client net.Conn) {
	l := &peerLink{from: pn.dialer(client), to: to, client: client}
	pn.mu.Lock()
	if pn.closed {
		pn.mu.Unlock()
		resetConn(client)
		return
	}
	l.silent = pn.cut(l)
	silent := l.silent // read under pn.mu: isolate writes it
	pn.links[l] = true
	pn.mu.Unlock()
	if silent { // dropped from the start: read and forget until healed
		pn.pipe(l, client, nil)
		return
	}
	server, err := net.DialTimeout("tcp", pn.targets[to], 5*time.Second)
	pn.mu.Lock()
	if err != nil || !pn.links[l] {
		pn.mu.Unlock()
		resetConn(client)
		if server != nil {
			resetConn(server)
		}
		pn.forget(l)
		return
	}
	l.server = server
	pn.mu.Unlock()
	go pn.pipe(l, server, client)
	pn.pipe(l, client, server)
}

// cut reports whether l must be silent (pn.mu held): either end is
// isolated, or, while any member is, the dialer is not known.
func (pn *peerNet) cut(l *peerLink) bool {
	if len(pn.isolated) == 0 {
		return false
	}
	return l.from < 0 || pn.isolated[l.from] || pn.isolated[l.to]
}

// pipe copies src to dst (nil: nowhere) while the link is not silent, and
// drops what it reads while it is.
func (pn *peerNet) pipe(l *peerLink, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			pn.mu.Lock()
			silent := l.silent
			pn.mu.Unlock()
			if !silent && dst != nil {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
		}
		if err != nil {
			if dst != nil {
				if err == io.EOF {
					_ = dst.Close()
				} else {
					resetConn(dst)
				}
			}
			_ = src.Close()
			pn.forget(l)
			return
		}
	}
}

func (pn *peerNet) forget(l *peerLink) {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	delete(pn.links, l)
}

// isolate isolates member i (on) or heals it: the links it cuts go silent;
// the links it no longer cuts, which lost what they dropped, are reset.
func (pn *peerNet) isolate(i int, on bool) {
	pn.mu.Lock()
	if on {
		pn.isolated[i] = true
	} else {
		delete(pn.isolated, i)
	}
	var reset []*peerLink
	for l := range pn.links {
		switch cut := pn.cut(l); {
		case cut:
			l.silent = true
		case l.silent:
			reset = append(reset, l)
			delete(pn.links, l)
		}
	}
	pn.mu.Unlock()
	for _, l := range reset {
		resetConn(l.client)
		if l.server != nil {
			resetConn(l.server)
		}
	}
}

// dialer returns the index of the member whose process dialed c, or -1.
func (pn *peerNet) dialer(c net.Conn) int {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return -1
	}
	// The dialer's socket is local remote, remote local, in /proc/net/tcp.
	inode := socketInode(remote, local)
	if inode == "" {
		return -1
	}
	for k, m := range pn.members {
		if pid := m.pid(); pid > 0 && holdsSocket(pid, inode) {
			return k
		}
	}
	return -1
}

// close stops the proxies and resets every connection.
func (pn *peerNet) close() {
	pn.mu.Lock()
	pn.closed = true
	links := pn.links
	pn.links = map[*peerLink]bool{}
	pn.mu.Unlock()
	for _, ln := range pn.lns {
		_ = ln.Close()
	}
	for l := range links {
		resetConn(l.client)
		if l.server != nil {
			resetConn(l.server)
		}
	}
}

// resetConn closes c with an RST.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
