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
			c.minHold, c.hold = tg.ttl, 5*tg.ttl/2 // a holder often outlives its ValidUntil in a cut
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
