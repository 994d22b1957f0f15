package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis Cluster made by NewRedis(t, Members(n)): n masters with the 16384
// hash slots spread evenly, and with Replicas(r) r replicas of each master.
// The masters are members 0…n−1; the replicas of master i are members
// n+i·r … n+i·r+r−1. Replicated clusters use a cluster-node-timeout of
// 1 s, so that a killed master is failed over within a few seconds.

// clusterTopo is the replicated Redis Cluster: what Failover needs.
type clusterTopo struct {
	s       *Server
	masters int
}

// buildRedisCluster lays out the nodes; formRedisCluster joins them.
func buildRedisCluster(bin, dir string, cfg config) (*Server, error) {
	n := cfg.members * (1 + cfg.replicas)
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	timeout := "2000"
	if cfg.replicas > 0 {
		timeout = "1000"
	}
	s := &Server{}
	for i := range n {
		mdir, err := memberDir(dir, i)
		if err != nil {
			return nil, err
		}
		s.addNode(redisNode(bin, mdir, ports[i],
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", timeout,
			"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"))
	}
	s.envValue = strings.Join(s.endpoints, ",")
	masters := cfg.members
	s.form = func(ctx context.Context) error { return formRedisCluster(ctx, s, masters) }
	if cfg.replicas > 0 {
		s.topo = &clusterTopo{s: s, masters: masters}
	}
	return s, nil
}

// formRedisCluster spreads the hash slots over the masters, makes every
// node meet the others, makes each replica replicate its master, and waits
// until every node reports the cluster ok and every replica is in sync.
func formRedisCluster(ctx context.Context, s *Server, masters int) error {
	const slots = 16384
	n := len(s.endpoints)
	clients := make([]*redis.Client, n)
	for i, addr := range s.endpoints {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr})
		defer clients[i].Close()
	}
	for i, c := range clients[:masters] {
		lo, hi := i*slots/masters, (i+1)*slots/masters-1
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
	known := func(ctx context.Context) error {
		for i, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				return fmt.Errorf("%s does not know every node yet", s.endpoints[i])
			}
		}
		return nil
	}
	if err := waitFor(ctx, "the nodes did not meet", known); err != nil {
		return err
	}
	if n > masters {
		replicas := (n - masters) / masters
		for i := range masters {
			id, err := clients[i].ClusterMyID(ctx).Result()
			if err != nil {
				return err
			}
			for j := range replicas {
				r := masters + i*replicas + j
				if err := clients[r].ClusterReplicate(ctx, id).Err(); err != nil {
					return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", s.endpoints[r], id, err)
				}
			}
		}
	}
	return waitFor(ctx, "the cluster did not reach state ok", func(ctx context.Context) error {
		return clusterSettled(ctx, s.endpoints, masters)
	})
}

// clusterSettled returns nil when every node at addrs reports the cluster
// ok, knows them all and sees each master with all its replicas, and there
// are masters masters, each replica of which is in sync with its master.
func clusterSettled(ctx context.Context, addrs []string, masters int) error {
	seen := 0
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		ci, err := c.ClusterInfo(ctx).Result()
		var shards []redis.ClusterShard
		if err == nil {
			shards, err = c.ClusterShards(ctx).Result()
		}
		c.Close()
		if err != nil {
			return err
		}
		for _, sh := range shards {
			if n := len(shardNodes(sh)); n != len(addrs)/masters {
				return fmt.Errorf("%s: a shard has %d nodes online, want %d", addr, n, len(addrs)/masters)
			}
		}
		if !strings.Contains(ci, "cluster_state:ok") || !strings.Contains(ci, "cluster_known_nodes:"+strconv.Itoa(len(addrs))) {
			return fmt.Errorf("%s: cluster not ok", addr)
		}
		repl, err := redisInfo(ctx, addr, "replication")
		if err != nil {
			return err
		}
		switch {
		case repl["role"] == "master":
			seen++
		case repl["master_link_status"] != "up":
			return fmt.Errorf("%s: replica not in sync with its master", addr)
		}
	}
	if seen != masters {
		return fmt.Errorf("%d masters, want %d", seen, masters)
	}
	return nil
}

// slotNodes returns the addresses serving key's hash slot, master first, as
// every running node reports them: an error while they disagree.
func (t *clusterTopo) slotNodes(ctx context.Context, key string) ([]string, error) {
	var agreed []string
	for i, addr := range t.s.endpoints {
		if !t.s.members[i].running() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: probeTimeout, ReadTimeout: probeTimeout})
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		var shards []redis.ClusterShard
		if err == nil {
			shards, err = c.ClusterShards(ctx).Result()
		}
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", addr, err)
		}
		var nodes []string
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					nodes = shardNodes(sh)
				}
			}
		}
		if len(nodes) == 0 {
			return nil, fmt.Errorf("%s: no node serves slot %d", addr, slot)
		}
		if agreed != nil && agreed[0] != nodes[0] {
			return nil, fmt.Errorf("the nodes disagree on slot %d's master: %s and %s", slot, agreed[0], nodes[0])
		}
		agreed = nodes
	}
	return agreed, nil
}

func (t *clusterTopo) primary(ctx context.Context, key string) (string, error) {
	nodes, err := t.slotNodes(ctx, key)
	if err != nil {
		return "", err
	}
	return nodes[0], nil
}

func (t *clusterTopo) failover(ctx context.Context, how Failover, key string) (string, error) {
	nodes, err := t.slotNodes(ctx, key)
	if err != nil {
		return "", err
	}
	if len(nodes) < 2 {
		return "", fmt.Errorf("the master %s has no replica in sync", nodes[0])
	}
	old := nodes[0]
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
		c := redis.NewClient(&redis.Options{Addr: nodes[1], MaxRetries: -1})
		t.s.faultAt = time.Now()
		err := c.Do(ctx, "CLUSTER", "FAILOVER").Err()
		c.Close()
		if err != nil {
			return "", fmt.Errorf("%s: CLUSTER FAILOVER: %w", nodes[1], err)
		}
	default:
		return "", fmt.Errorf("unknown %v", how)
	}
	var primary string
	err = waitFor(ctx, "the nodes did not agree on a new master", func(ctx context.Context) error {
		p, err := t.primary(ctx, key)
		if err != nil {
			return err
		}
		if p == old {
			return fmt.Errorf("the nodes still report %s", old)
		}
		primary = p
		return nil
	})
	if err != nil {
		return "", err
	}
	if how == Crash {
		// It keeps its nodes.conf: it rejoins, learns that its slots
		// moved, and becomes the new master's replica (empty, then in
		// sync).
		if err := t.s.startMembers([]int{i}); err != nil {
			return "", err
		}
	}
	err = waitFor(ctx, "the cluster did not settle after the failover", func(ctx context.Context) error {
		return clusterSettled(ctx, t.s.endpoints, t.masters)
	})
	return primary, err
}

// shardNodes returns the addresses of a shard's online nodes, its master
// first; none while it has no master online (a replica of a failed master
// is not one until it is promoted).
func shardNodes(sh redis.ClusterShard) []string {
	var master, replicas []string
	for _, n := range sh.Nodes {
		if n.Health != "online" {
			continue
		}
		addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
		if n.Role == "master" {
			master = append(master, addr)
		} else {
			replicas = append(replicas, addr)
		}
	}
	if len(master) != 1 {
		return nil
	}
	return append(master, replicas...)
}
