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
	form:    formRedisCluster,
}

// buildRedis lays out one server, or with cfg.members > 1 the masters of a
// Redis Cluster (formed by formRedisCluster once they run). Nothing is
// persisted: a restart loses the data (a cluster member keeps its
// nodes.conf, so it rejoins).
func buildRedis(bin, dir string, cfg config) (*Server, error) {
	n := max(cfg.members, 1)
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	s := &Server{}
	for i := range n {
		addr := loopback(ports[i])
		mdir := dir
		argv := []string{bin,
			"--port", strconv.Itoa(ports[i]),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--protected-mode", "no",
		}
		if n > 1 {
			mdir = filepath.Join(dir, fmt.Sprintf("m%d", i))
			if err := os.MkdirAll(mdir, 0o755); err != nil {
				return nil, err
			}
			argv = append(argv, "--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(mdir, "nodes.conf"),
				"--cluster-node-timeout", "2000")
		}
		argv = append(argv, "--dir", mdir)
		s.endpoints = append(s.endpoints, addr)
		s.members = append(s.members, &proc{
			name:    "Redis " + addr,
			argv:    argv,
			dir:     mdir,
			logPath: filepath.Join(mdir, "redis.log"),
			target:  addr,
		})
	}
	s.addr = s.endpoints[0]
	s.envValue = strings.Join(s.endpoints, ",")
	return s, nil
}

// formRedisCluster spreads the 16384 hash slots over the members, makes them
// meet, and waits until every member reports the cluster ok.
func formRedisCluster(ctx context.Context, s *Server) error {
	const slots = 16384
	n := len(s.endpoints)
	clients := make([]*redis.Client, n)
	for i, addr := range s.endpoints {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr})
		defer clients[i].Close()
	}
	for i, c := range clients {
		lo, hi := i*slots/n, (i+1)*slots/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", s.endpoints[i], err)
		}
	}
	for _, addr := range s.endpoints[1:] {
		host, port, _ := net.SplitHostPort(addr)
		if err := clients[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", addr, err)
		}
	}
	for {
		ok := true
		for _, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster did not reach state ok: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
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
