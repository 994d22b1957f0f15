package chaos_test

import "testing"

// A group of the workers, a holder among them, is cut off from the server
// (every one of its connections blackholed at once) while the others go
// on; every fault of the run is such a cut. Grant safety holds, and each
// holder on the cut-off side learns of its loss from its lease by its
// ValidUntil (the checker's "loss told").
func TestPartitionWorkerGroup(t *testing.T) {
	for name, tg := range map[string]func(*testing.T) target{"redis": redisTarget, "postgres": postgresTarget, "etcd": etcdTarget} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, tg := chaosConfig(t), tg(t)
			c.partitions = true
			// A holder often outlives its ValidUntil in a cut; a new one
			// always does in the first (partition, firstCutHolds).
			c.minHold, c.hold = 3*tg.ttl/2, 5*tg.ttl/2
			h := runNemesis(t, tg, c)
			if len(h.Partitions) == 0 {
				t.Fatal("no group was cut off")
			}
			if h.Told == 0 && !t.Failed() {
				t.Errorf("no holder was cut off at its ValidUntil: the run did not exercise the partition (faults %v)", h.Faults)
			}
		})
	}
}

// The leader member of a three-member etcd cluster is cut off from its
// peers (both directions, through the peer proxies) for 1 to 3 s, again and
// again, while every worker keeps talking to every member, the isolated one
// among them. The isolated member cannot renew or grant (no quorum): grant
// safety holds and holders whose renewals went to it are told by their
// ValidUntil; the checker finds no overlap and no write outside a grant.
func TestPartitionEtcdLeader(t *testing.T) {
	for _, workload := range []string{"lock", "leader"} {
		t.Run(workload, func(t *testing.T) {
			t.Parallel()
			c := chaosConfig(t)
			c.isolations, c.leader = true, workload == "leader"
			c.duration += c.duration / 2 // elections take time from the workers
			if c.leader {
				// Each isolation costs the leader workload a term and more:
				// the new etcd leader renews every lease to its full ttl, so
				// a lost term's key outlives it by a ttl. In 12 s some runs
				// (seed 837691) had 2 terms; twice as long, 6 to 16.
				c.duration *= 2
			}
			tg := etcdIsolatingTarget(t)
			h := runNemesis(t, tg, c)
			if len(h.Isolations) < 2 {
				t.Fatalf("the leader was isolated %d times, want at least 2 (faults %v)", len(h.Isolations), h.Faults)
			}
			t.Logf("%d isolations; %d holders told of a loss during one", len(h.Isolations), h.lostDuring(h.Isolations, tg.ttl))
		})
	}
}
