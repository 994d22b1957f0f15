package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name under which the Sentinels of NewRedis(t,
// Replicas(n), Sentinels(m)) know the primary.
const SentinelMaster = "leasehold"

// sentinelTopo is a Redis primary, its replicas and the Sentinels that
// watch them. Members 0…nodes−1 are the data nodes (the endpoints; member 0
// is the first primary), the rest are the Sentinels.
type sentinelTopo struct {
	s         *Server
	nodes     int
	args      [][]string // each data node's argv without --replicaof
	sentinels []string   // host:port of each Sentinel
}

func buildSentinel(bin, dir string, cfg config) (*Server, error) {
	nodes := 1 + cfg.replicas
	ports, err := freePorts(nodes + cfg.sentinels)
	if err != nil {
		return nil, err
	}
	s := &Server{}
	t := &sentinelTopo{s: s, nodes: nodes}
	for i := range nodes {
		mdir, err := memberDir(dir, i)
		if err != nil {
			return nil, err
		}
		p := redisNode(bin, mdir, ports[i], "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
		t.args = append(t.args, p.argv)
		if i > 0 {
			p.argv = replicaOf(p.argv, loopback(ports[0]))
		}
		s.addNode(p)
	}
	for i := range cfg.sentinels {
		mdir, err := memberDir(dir, nodes+i)
		if err != nil {
			return nil, err
		}
		port := ports[nodes+i]
		conf := filepath.Join(mdir, "sentinel.conf")
		// Down after 2 s (two of a Sentinel's pings, which it sends every
		// second: with one, a late reply under load makes a healthy
		// primary fail over again); another failover by one Sentinel
		// may start 2 × failover-timeout after its last.
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel monitor %s 127.0.0.1 %d %d
sentinel down-after-milliseconds %[3]s 2000
sentinel failover-timeout %[3]s 2000
sentinel parallel-syncs %[3]s %[6]d
`, port, mdir, SentinelMaster, ports[0], cfg.sentinels/2+1, cfg.replicas)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, err
		}
		addr := loopback(port)
		t.sentinels = append(t.sentinels, addr)
		s.members = append(s.members, &proc{
			name:    "Redis Sentinel " + addr,
			argv:    []string{bin, conf, "--sentinel"},
			dir:     mdir,
			logPath: filepath.Join(mdir, "sentinel.log"),
			target:  addr,
			port:    port,
		})
	}
	s.envValue = s.addr
	s.topo = t
	s.form = func(ctx context.Context) error {
		return waitFor(ctx, "the Sentinels did not see every replica in sync", func(ctx context.Context) error {
			return t.settled(ctx, s.addr)
		})
	}
	return s, nil
}

// replicaOf returns argv with --replicaof primary.
func replicaOf(argv []string, primary string) []string {
	host, port, _ := net.SplitHostPort(primary)
	return append(slices.Clip(argv), "--replicaof", host, port)
}

// SentinelAddrs returns the host:port of every Sentinel (none unless the
// server was made with Sentinels).
func (s *Server) SentinelAddrs() []string {
	if t, ok := s.topo.(*sentinelTopo); ok {
		return slices.Clone(t.sentinels)
	}
	return nil
}

// SentinelURL returns the URL that backend.Open takes for this primary
// through its Sentinels: redis+sentinel://host:port,…/SentinelMaster.
func (s *Server) SentinelURL() string {
	return "redis+sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + SentinelMaster
}

// FailoverOptions returns the options of a go-redis failover client of
// this primary through its Sentinels, with ContextTimeoutEnabled (as
// leasehold's backends want): redis.NewFailoverClient(s.FailoverOptions()).
func (s *Server) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs(), ContextTimeoutEnabled: true}
}

// FailoverClient returns a failover client of this primary (with
// FailoverOptions), closed when the test ends.
func (s *Server) FailoverClient(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: probeTimeout, ReadTimeout: probeTimeout})
}

// primary returns the address every Sentinel reports for SentinelMaster.
func (t *sentinelTopo) primary(ctx context.Context, _ string) (string, error) {
	var agreed string
	for _, addr := range t.sentinels {
		c := sentinelClient(addr)
		hp, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		c.Close()
		if err != nil {
			return "", fmt.Errorf("sentinel %s: %w", addr, err)
		}
		if len(hp) != 2 {
			return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME answered %q", addr, hp)
		}
		got := net.JoinHostPort(hp[0], hp[1])
		if agreed != "" && got != agreed {
			return "", fmt.Errorf("the Sentinels disagree: %s and %s", agreed, got)
		}
		agreed = got
	}
	return agreed, nil
}

// settled returns nil when primary is a master with every other data node
// its replica in sync, and every Sentinel reports it, sees no fault in it
// nor in a replica, and knows the other Sentinels: the state in which the
// next failover can be done.
func (t *sentinelTopo) settled(ctx context.Context, primary string) error {
	for _, addr := range t.s.endpoints {
		repl, err := redisInfo(ctx, addr, "replication")
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		switch {
		case addr == primary && repl["role"] != "master":
			return fmt.Errorf("%s is not yet the master", addr)
		case addr == primary && repl["connected_slaves"] != strconv.Itoa(t.nodes-1):
			return fmt.Errorf("%s has %s replicas connected, want %d", addr, repl["connected_slaves"], t.nodes-1)
		case addr != primary && (repl["role"] != "slave" || net.JoinHostPort(repl["master_host"], repl["master_port"]) != primary || repl["master_link_status"] != "up"):
			return fmt.Errorf("%s is not yet a replica of %s in sync", addr, primary)
		}
	}
	for _, addr := range t.sentinels {
		c := sentinelClient(addr)
		m, err := c.Master(ctx, SentinelMaster).Result()
		var replicas []map[string]string
		if err == nil {
			replicas, err = c.Replicas(ctx, SentinelMaster).Result()
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", addr, err)
		}
		if got := net.JoinHostPort(m["ip"], m["port"]); got != primary || m["flags"] != "master" {
			return fmt.Errorf("sentinel %s: master %s flags %q, want %s without faults", addr, got, m["flags"], primary)
		}
		if m["num-other-sentinels"] != strconv.Itoa(len(t.sentinels)-1) {
			return fmt.Errorf("sentinel %s knows %s other Sentinels, want %d", addr, m["num-other-sentinels"], len(t.sentinels)-1)
		}
		healthy := 0
		for _, r := range replicas {
			// Its link to the primary is checked on the replica itself
			// above: a Sentinel reads it (INFO) only every 10 s.
			if r["flags"] == "slave" {
				healthy++
			}
		}
		if healthy != t.nodes-1 {
			return fmt.Errorf("sentinel %s sees %d healthy replicas, want %d", addr, healthy, t.nodes-1)
		}
	}
	return nil
}

func (t *sentinelTopo) failover(ctx context.Context, how Failover, _ string) (string, error) {
	old, err := t.primary(ctx, "")
	if err != nil {
		return "", err
	}
	i, err := t.s.memberAt(old)
	if err != nil {
		return "", err
	}
	switch how {
	case Crash:
		t.s.faultAt = time.Now()
		if err := t.s.stopMembers([]int{i}); err != nil {
			return "", err
		}
	case Handover:
		err := waitFor(ctx, "SENTINEL FAILOVER", func(ctx context.Context) error {
			c := sentinelClient(t.sentinels[0])
			defer c.Close()
			t.s.faultAt = time.Now()
			return c.Failover(ctx, SentinelMaster).Err()
		})
		if err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("unknown %v", how)
	}
	var primary string
	err = waitFor(ctx, "the Sentinels did not agree on a new primary", func(ctx context.Context) error {
		p, err := t.primary(ctx, "")
		if err != nil {
			return err
		}
		if p == old {
			return fmt.Errorf("the Sentinels still report %s", old)
		}
		repl, err := redisInfo(ctx, p, "replication")
		if err != nil {
			return err
		}
		if repl["role"] != "master" {
			return fmt.Errorf("%s is not yet a master", p)
		}
		primary = p
		return nil
	})
	if err != nil {
		return "", err
	}
	if how == Crash {
		// It comes back empty (nothing is persisted), as the new
		// primary's replica.
		m := t.s.members[i]
		m.mu.Lock()
		m.argv = replicaOf(t.args[i], primary)
		m.mu.Unlock()
		if err := t.s.startMembers([]int{i}); err != nil {
			return "", err
		}
	}
	err = waitFor(ctx, "the topology did not settle after the failover", func(ctx context.Context) error {
		p, err := t.primary(ctx, "")
		if err != nil {
			return err
		}
		if p != primary {
			return fmt.Errorf("the Sentinels failed over again, from %s to %s", primary, p)
		}
		return t.settled(ctx, primary)
	})
	return primary, err
}
