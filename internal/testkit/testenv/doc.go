// Package testenv gives tests real Redis, PostgreSQL and etcd servers.
//
// # Lookup order
//
// For each kind of server, testenv uses the first of these that applies:
//
//  1. An address from the environment:
//     LEASEHOLD_REDIS_ADDR (host:port),
//     LEASEHOLD_PG_DSN (a postgres:// DSN),
//     LEASEHOLD_ETCD_ENDPOINTS (comma-separated host:port or http://host:port).
//  2. A server binary, started on a free loopback port in a temporary
//     directory: redis-server and etcd from PATH; postgres and initdb from PATH
//     or else from /usr/lib/postgresql/*/bin, newest version first. On Debian
//     these come from the packages redis-server, etcd-server and postgresql.
//  3. A container (images redis:7, postgres:16, quay.io/coreos/etcd:v3.5.17)
//     through testcontainers-go, when a Docker engine answers a ping.
//  4. Otherwise the test is skipped with a one-line reason naming what to
//     install. With LEASEHOLD_REQUIRE_BACKENDS=1 (as CI sets) it fails instead.
//
// Whatever the source, testenv waits until the server answers (Redis PING,
// PostgreSQL SELECT 1, etcd /health) for at most 30 seconds; a server that does
// not answer fails the test, with the tail of its log if testenv started it.
// A server testenv started on a port that another process took meanwhile is
// started again on fresh ports.
//
// # Shared and dedicated servers
//
// [Redis], [Postgres] and [Etcd] return a server shared by every test of the
// test binary: it is started on first use and stopped by [Main]. Tests that
// share a server must not depend on each other's data (use distinct keys,
// tables or prefixes), and must not stop or restart it.
//
// [NewRedis], [NewPostgres] and [NewEtcd] start a server for one test only,
// which the test may [Server.Stop], [Server.Start] and [Server.Restart]
// (and, for a cluster made with [Members] — an etcd cluster, or a Redis
// Cluster of n masters — stop and start single members; an etcd cluster made
// with [PeerProxies] too routes its peer traffic through proxies, and
// [Server.IsolateMember] cuts one member off from its peers while its client
// port answers). It is stopped by
// t.Cleanup when the test ends, whether it passed or failed. A dedicated
// server needs the binary: when the environment variable of its kind is set,
// or when only a container could serve, the constructor skips (or fails
// under LEASEHOLD_REQUIRE_BACKENDS=1).
//
// LEASEHOLD_REDIS_ADDR may list several host:port, comma-separated: the
// nodes of a Redis Cluster.
//
// # Replicated servers
//
// [Replicas] and [Sentinels] make a dedicated server replicated, the way
// production runs it: NewRedis(t, Replicas(2), Sentinels(3)) is a primary,
// two replicas and three Sentinels ([Server.SentinelURL],
// [Server.SentinelAddrs]); NewRedis(t, Members(3), Replicas(1)) a Redis
// Cluster whose three masters have a replica each; NewPostgres(t,
// Replicas(1)) a primary with a synchronous streaming standby
// (pg_basebackup -R), reached through a two-host DSN with
// target_session_attrs=read-write. [Server.Failover] kills the primary
// ([Crash]) or hands it over ([Handover]) and returns once clients can reach
// the new one and the old one is its replica again; [Server.Primary] says
// which node is the primary now.
//
// [Server.Env] returns the environment variables that make testenv in a child
// process (for example the test binary run again with exec.Command) find the
// same server.
//
// # Lifetime
//
// A test binary that uses testenv must call [Main] from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Servers are started in their own process group with a parent-death signal
// (SIGKILL), so they die with the test binary even when it panics or times
// out. testenv only ever signals processes it started itself, and removes the
// temporary directories it made; directories left by a test binary that died
// are removed by the next run once their owner is gone.
//
// # Running as root
//
// postgres and initdb refuse to run as root. When the tests run as root,
// testenv runs them as the "postgres" OS user (created by the Debian
// postgresql package) and makes their directories under os.TempDir() owned by
// that user, so os.TempDir() must be reachable by it (as /tmp is).
package testenv
