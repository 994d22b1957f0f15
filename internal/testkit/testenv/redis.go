package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

var redisKind = &kind{
	name:    "Redis",
	short:   "Redis",
	envVar:  "LEASEHOLD_REDIS_ADDR",
	envForm: "host:port",
	install: "redis-server",
	stopSig: syscall.SIGKILL, // no persistence: a restart loses the data
	find:    func() (string, error) { return lookPath("redis-server") },
	build:   buildRedis,
	parse:   parseRedis,
	probe:   pingRedis,
}

// buildRedis lays out one server; with Members(n > 1) the nodes of a Redis
// Cluster (rediscluster.go); with Sentinels a primary, its replicas and the
// Sentinels that watch them (sentinel.go). Nothing is persisted: a restart
// loses the data (a cluster node keeps its nodes.conf, so it rejoins).
func buildRedis(bin, dir string, cfg config) (*Server, error) {
	switch {
	case cfg.sentinels > 0:
		return buildSentinel(bin, dir, cfg)
	case cfg.members > 1:
		return buildRedisCluster(bin, dir, cfg)
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	s := &Server{}
	s.addNode(redisNode(bin, dir, ports[0]))
	s.envValue = s.addr
	return s, nil
}

// redisNode is one redis-server process on port, its files in dir.
func redisNode(bin, dir string, port int, args ...string) *proc {
	addr := loopback(port)
	argv := append([]string{bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--enable-debug-command", "local", // DEBUG SLEEP: a stalled node, for fault tests
		"--dir", dir,
	}, args...)
	return &proc{
		name:    "Redis " + addr,
		argv:    argv,
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
		target:  addr,
		port:    port,
	}
}

// addNode adds a data node: a member whose address is an endpoint (the
// first one is Addr).
func (s *Server) addNode(p *proc) {
	s.members = append(s.members, p)
	s.endpoints = append(s.endpoints, p.target)
	if s.addr == "" {
		s.addr = p.target
	}
}

// memberDir makes the directory of member i under dir.
func memberDir(dir string, i int) (string, error) {
	d := filepath.Join(dir, fmt.Sprintf("m%d", i))
	return d, os.MkdirAll(d, 0o755)
}

// waitFor calls cond every pollInterval until it returns nil or ctx ends,
// and then returns its last error.
func waitFor(ctx context.Context, what string, cond func(ctx context.Context) error) error {
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(pollInterval):
		}
	}
}

// redisInfo returns the fields of INFO section of the node at addr.
func redisInfo(ctx context.Context, addr, section string) (map[string]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: probeTimeout, ReadTimeout: probeTimeout})
	defer c.Close()
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for line := range strings.SplitSeq(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// parseRedis accepts host:port, or a comma-separated list of a Redis
// Cluster's nodes.
func parseRedis(value string) (*Server, error) {
	s := &Server{}
	for addr := range strings.SplitSeq(value, ",") {
		addr = strings.TrimSpace(addr)
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("want host:port[,host:port...]: %w", err)
		}
		s.endpoints = append(s.endpoints, addr)
	}
	s.addr, s.target = s.endpoints[0], s.endpoints[0]
	return s, nil
}

// pingRedis sends PING over a plain connection and expects +PONG.
func pingRedis(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
