// Package chaos holds the fault-injection tier of leasehold's tests: seeded
// nemesis runs per backend that cut, delay and reset the clients'
// connections (through internal/testkit/faultproxy), restart the server and
// stall holders past their ttl, while workers contend for a key and write
// to a fenced resource; afterwards a checker goes through the recorded
// history.
//
// The workloads: the lock with a fenced resource; the semaphore (3 slots);
// the leader with term-stamped writes; the timers (every worker runs the
// same timer on its own scheduler, MaxConcurrency 1 and 2; the checker
// counts runs per tick, their overlap per slot, and a liveness floor); the
// jobs (a jobs.Runner per worker over the backend's registry — memjobs on
// etcd —, workers that crash, and a completion ledger checked after a
// bounded drain). A three-member etcd cluster run stops and starts members,
// the leader first; a PostgreSQL run silences a holder's connection past
// its ttl. Every run cuts a group of workers (a holder among them) off from
// the server at least once while the others go on, and the checker holds
// each cut-off holder to being told of its loss by its ValidUntil; the
// partition runs (TestPartition*) do only that, or isolate the leader
// member of an etcd cluster from its peers (its clients still reach it)
// again and again. The failover runs (TestFailover*) fail the primary of a
// replicated server over again and again, a crash and a handover in turn,
// under the lock, timers and jobs workloads at once (with LEASEHOLD_CHAOS=1
// also the semaphore and the leader): Redis with Sentinel with and without
// replica acks, a Redis Cluster with replicas, PostgreSQL with a
// synchronous standby; a failover excuses no violation, except that on
// PostgreSQL it frees the grants held, whose holders must be told.
// docs/guarantees.md lists each run and what it shows.
//
// It has no code outside its tests. `go test ./chaos/` runs a short seeded
// slice; LEASEHOLD_CHAOS=1 runs the long tier (a minute per backend);
// LEASEHOLD_CHAOS_SEED=N replays one seed. A failing run prints its seed and
// the path of the history it saved.
package chaos
