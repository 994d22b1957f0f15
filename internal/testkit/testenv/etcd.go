package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

var etcdKind = &kind{
	name:    "etcd",
	short:   "Etcd",
	envVar:  "LEASEHOLD_ETCD_ENDPOINTS",
	envForm: "host:port,...",
	install: "etcd-server",
	stopSig: syscall.SIGKILL, // etcd fsyncs its WAL: nothing committed is lost
	find:    func() (string, error) { return lookPath("etcd") },
	build:   buildEtcd,
	parse:   parseEtcd,
	probe:   etcdHealth,
}

// buildEtcd lays out a cluster of cfg.members members named m0, m1, ...,
// each with a client and a peer port and a data directory of its own.
func buildEtcd(bin, dir string, cfg config) (*Server, error) {
	n := cfg.members
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	clientURL := func(i int) string { return "http://" + loopback(ports[2*i]) }
	listenPeerURL := func(i int) string { return "http://" + loopback(ports[2*i+1]) }
	peerURL := listenPeerURL
	s := &Server{}
	if cfg.peerProxies { // the members advertise their proxies
		if s.peers, err = newPeerNet(n); err != nil {
			return nil, err
		}
		peerURL = func(i int) string { return "http://" + s.peers.addr(i) }
	}
	cluster := make([]string, n)
	for i := range n {
		cluster[i] = fmt.Sprintf("m%d=%s", i, peerURL(i))
	}
	var env []string
	if runtime.GOARCH != "amd64" {
		env = append(env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	for i := range n {
		name, addr := fmt.Sprintf("m%d", i), loopback(ports[2*i])
		s.endpoints = append(s.endpoints, addr)
		s.members = append(s.members, &proc{
			name: fmt.Sprintf("etcd member %s %s", name, addr),
			argv: []string{bin,
				"--name", name,
				"--data-dir", filepath.Join(dir, name),
				"--listen-client-urls", clientURL(i),
				"--advertise-client-urls", clientURL(i),
				"--listen-peer-urls", listenPeerURL(i),
				"--initial-advertise-peer-urls", peerURL(i),
				"--initial-cluster", strings.Join(cluster, ","),
				"--initial-cluster-state", "new",
				"--heartbeat-interval=10",
				"--election-timeout=100",
			},
			env:     env,
			dir:     dir,
			logPath: filepath.Join(dir, name+".log"),
			target:  addr,
			port:    ports[2*i],
		})
	}
	s.addr = s.endpoints[0]
	s.envValue = strings.Join(s.endpoints, ",")
	if s.peers != nil {
		var targets []string
		for i := range n {
			targets = append(targets, loopback(ports[2*i+1]))
		}
		s.peers.start(s.members, targets)
	}
	return s, nil
}

func parseEtcd(value string) (*Server, error) {
	s := &Server{}
	for ep := range strings.SplitSeq(value, ",") {
		ep = strings.TrimPrefix(strings.TrimSpace(ep), "http://")
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return nil, fmt.Errorf("want host:port or http://host:port: %w", err)
		}
		s.endpoints = append(s.endpoints, ep)
	}
	s.addr, s.target = s.endpoints[0], s.endpoints[0]
	return s, nil
}

var healthClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// etcdHealthTimeout bounds one /health request. etcd answers it with a quorum
// read that, when leadership has just moved, can be lost and only fail after
// etcd's own 1 s timeout; a fresh request is usually faster than that.
const etcdHealthTimeout = 300 * time.Millisecond

// etcdHealth asks the member's /health endpoint, which answers true once the
// cluster has a leader and the member serves quorum reads.
func etcdHealth(ctx context.Context, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, etcdHealthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return errors.New("unhealthy: " + strings.TrimSpace(string(body)))
	}
	return nil
}
