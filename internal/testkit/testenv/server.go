package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// kind describes one kind of server; redis.go, postgres.go and etcd.go each
// define one. Everything else is shared.
type kind struct {
	name    string         // "Redis", for messages
	short   string         // "Redis", as in NewRedis
	envVar  string         // LEASEHOLD_REDIS_ADDR
	envForm string         // what envVar holds, for messages: "host:port"
	install string         // the Debian package that has the binaries
	stopSig syscall.Signal // ends a member; Restart uses it too

	// find locates the binaries; its error says what is missing.
	find func() (bin string, err error)
	// build lays out a server in dir (made by the caller) on fresh ports:
	// its members, addresses and envValue. It does not start anything.
	build func(bin, dir string, cfg config) (*Server, error)
	// parse makes a server from a value of envVar (or from a container).
	parse func(value string) (*Server, error)
	// probe returns nil when the server at target answers.
	probe func(ctx context.Context, target string) error
}

type source int

const (
	fromEnv source = iota + 1
	fromBinary
	fromContainer
)

// Server is a running server found or started by testenv.
type Server struct {
	kind      *kind
	src       source
	shared    bool
	addr      string   // host:port of the server, or of the first etcd member
	dsn       string   // PostgreSQL only
	endpoints []string // host:port of every member
	envValue  string   // value of kind.envVar that finds this server
	target    string   // what kind.probe talks to when there are no members

	dir       string                      // fromBinary: data dirs and logs
	members   []*proc                     // fromBinary
	terminate func(context.Context) error // fromContainer

	// form, when set, runs once after the members of a new server first
	// answer: it joins them into a cluster or a replicated topology.
	form func(ctx context.Context) error
	// topo is the replicated topology (replicated.go), nil for a plain
	// server or cluster.
	topo    topology
	faultAt time.Time // when the last Failover's fault was injected
	peers   *peerNet  // the members' peer proxies (etcd with PeerProxies), or nil

	mu     sync.Mutex // serialises Start, Stop, Restart, Failover and close
	closed bool
}

// Addr returns the server's host:port (for etcd, the first member's).
func (s *Server) Addr() string { return s.addr }

// DSN returns the PostgreSQL connection string, or "" for other kinds.
func (s *Server) DSN() string { return s.dsn }

// Endpoints returns the host:port of every member (one for Redis and
// PostgreSQL). clientv3 accepts them as they are.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Env returns the LEASEHOLD_* environment variables that make testenv in a
// child process use this same server, for exec.Cmd.Env = append(os.Environ(),
// s.Env()...).
func (s *Server) Env() []string { return []string{s.kind.envVar + "=" + s.envValue} }

// Option configures a dedicated server.
type Option func(*config)

type config struct {
	members     int
	replicas    int      // per primary (Redis), or 1: a standby (PostgreSQL)
	sentinels   int      // Redis only
	pgSettings  []string // "name=value", NewPostgres only
	peerProxies bool     // NewEtcd only
}

// Members makes NewEtcd start a cluster of n members, and NewRedis a Redis
// Cluster of n masters with the hash slots spread evenly (default 1: a
// single server).
func Members(n int) Option { return func(c *config) { c.members = n } }

// Main runs the tests and then stops every server this process started:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Redis returns the test binary's shared Redis server.
func Redis(t testing.TB) *Server { t.Helper(); return shared(t, redisKind) }

// Postgres returns the test binary's shared PostgreSQL server.
func Postgres(t testing.TB) *Server { t.Helper(); return shared(t, postgresKind) }

// Etcd returns the test binary's shared single-member etcd server.
func Etcd(t testing.TB) *Server { t.Helper(); return shared(t, etcdKind) }

// NewRedis starts a Redis server for this test only.
func NewRedis(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return dedicated(t, redisKind, opts)
}

// NewPostgres starts a PostgreSQL server for this test only.
func NewPostgres(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return dedicated(t, postgresKind, opts)
}

// NewEtcd starts an etcd server, or with [Members] a cluster, for this test
// only.
func NewEtcd(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return dedicated(t, etcdKind, opts)
}

// Restart stops the server as a crash would (Redis and etcd: SIGKILL;
// PostgreSQL: immediate shutdown) and starts it again on the same ports and
// data directories, then waits until it answers. Redis keeps no data across a
// restart.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.control(t, "Restart", func() error {
		if err := s.stopMembers(s.all()); err != nil {
			return err
		}
		return s.startMembers(s.all())
	})
}

// Stop stops the server now. Stopping a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.control(t, "Stop", func() error { return s.stopMembers(s.all()) })
}

// Start starts a stopped server again on the same ports and waits until it
// answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.control(t, "Start", func() error { return s.startMembers(s.all()) })
}

// StopMember stops member i (an index into Endpoints) as a crash would. It
// keeps its data directory, so StartMember can bring it back into the
// cluster. If a majority of the members still runs, StopMember then waits
// until they answer again, that is until the cluster has a leader.
func (s *Server) StopMember(t testing.TB, i int) {
	t.Helper()
	s.control(t, "StopMember", func() error {
		if err := s.checkMember(i); err != nil {
			return err
		}
		if err := s.stopMembers([]int{i}); err != nil {
			return err
		}
		return s.waitQuorum()
	})
}

// StartMember starts member i again and waits until it answers.
func (s *Server) StartMember(t testing.TB, i int) {
	t.Helper()
	s.control(t, "StartMember", func() error {
		if err := s.checkMember(i); err != nil {
			return err
		}
		return s.startMembers([]int{i})
	})
}

func (s *Server) control(t testing.TB, op string, f func() error) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.shared:
		t.Fatalf("testenv: %s on a shared %s server; use New%s for a server the test may stop", op, s.kind.name, s.kind.short)
	case s.src != fromBinary:
		t.Fatalf("testenv: %s needs a %s started by testenv", op, s.kind.name)
	case s.closed:
		t.Fatalf("testenv: %s on a %s server that was already cleaned up", op, s.kind.name)
	}
	if err := f(); err != nil {
		t.Fatalf("testenv: %s: %v", op, err)
	}
}

func (s *Server) checkMember(i int) error {
	if i < 0 || i >= len(s.members) {
		return fmt.Errorf("no member %d: the %s server has %d", i, s.kind.name, len(s.members))
	}
	return nil
}

func (s *Server) all() []int {
	idx := make([]int, len(s.members))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// startMembers starts the given members, then waits until each answers. All
// are started before any is waited for: etcd members only answer once a
// quorum of them runs.
func (s *Server) startMembers(idx []int) error {
	for _, i := range idx {
		if err := s.members[i].start(); err != nil {
			return err
		}
	}
	var errs []error
	for _, i := range idx {
		errs = append(errs, s.members[i].waitReady())
	}
	return errors.Join(errs...)
}

// waitQuorum waits until the running members answer, if they are a majority.
func (s *Server) waitQuorum() error {
	var running []*proc
	for _, m := range s.members {
		if m.running() {
			running = append(running, m)
		}
	}
	if 2*len(running) <= len(s.members) {
		return nil
	}
	var errs []error
	for _, m := range running {
		errs = append(errs, m.waitReady())
	}
	return errors.Join(errs...)
}

// stopMembers stops the given members in parallel.
func (s *Server) stopMembers(idx []int) error {
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for j, i := range idx {
		wg.Go(func() { errs[j] = s.members[i].stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// close stops whatever testenv started for s and removes its directory.
func (s *Server) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	unregister(s)
	var errs []error
	if s.members != nil {
		errs = append(errs, s.stopMembers(s.all()))
	}
	if s.peers != nil {
		s.peers.close()
	}
	if s.terminate != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs = append(errs, s.terminate(ctx))
		cancel()
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}

// logTails returns each member's recent log, for a failed test.
func (s *Server) logTails() string {
	var b strings.Builder
	for _, m := range s.members {
		fmt.Fprintf(&b, "%s (%s):\n%s\n", m.name, m.logPath, m.logTail())
	}
	return b.String()
}

// startLocal starts a server from bin in a new directory, on fresh ports if
// the first ones turn out to be taken.
func startLocal(k *kind, bin string, cfg config) (*Server, error) {
	var err error
	for range 3 {
		var dir string
		if dir, err = makeTempDir(strings.ToLower(k.short)); err != nil {
			return nil, err
		}
		var s *Server
		if s, err = k.build(bin, dir, cfg); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s.kind, s.src, s.dir = k, fromBinary, dir
		for _, m := range s.members {
			m.kind = k
		}
		register(s)
		if err = s.startMembers(s.all()); err == nil && s.form != nil {
			ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
			err = s.form(ctx)
			cancel()
			if err != nil {
				err = fmt.Errorf("forming the %s cluster: %w\n%s", k.name, err, s.logTails())
			}
		}
		if err == nil {
			return s, nil
		}
		err = errors.Join(err, s.close())
		if !errors.Is(err, errPortInUse) {
			break
		}
	}
	return nil, err
}

// external makes a server from a value of the kind's environment variable
// and waits until it answers.
func external(k *kind, value string, src source) (*Server, error) {
	s, err := k.parse(value)
	if err != nil {
		return nil, err
	}
	s.kind, s.src, s.envValue = k, src, value
	if err := poll(k.probe, s.target, nil); err != nil {
		return nil, fmt.Errorf("%s at %s does not answer: %w", k.name, s.addr, err)
	}
	return s, nil
}

var (
	mainCalled atomic.Bool

	liveMu sync.Mutex
	live   = map[*Server]bool{} // servers to stop at exit

	hooksMu       sync.Mutex
	shutdownHooks []func() error // e.g. removing the PostgreSQL template

	sharedMu sync.Mutex
	shareds  = map[*kind]*sharedSlot{}
)

type sharedSlot struct {
	mu   sync.Mutex
	done bool
	s    *Server
	skip string // why there is no server
	err  error  // why starting one failed
}

func register(s *Server) {
	liveMu.Lock()
	defer liveMu.Unlock()
	live[s] = true
}

func unregister(s *Server) {
	liveMu.Lock()
	defer liveMu.Unlock()
	delete(live, s)
}

func atShutdown(f func() error) {
	hooksMu.Lock()
	defer hooksMu.Unlock()
	shutdownHooks = append(shutdownHooks, f)
}

// shutdown stops every server still running, then runs the shutdown hooks.
func shutdown() error {
	liveMu.Lock()
	servers := make([]*Server, 0, len(live))
	for s := range live {
		servers = append(servers, s)
	}
	liveMu.Unlock()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.close() })
	}
	wg.Wait()
	hooksMu.Lock()
	hooks := shutdownHooks
	shutdownHooks = nil
	hooksMu.Unlock()
	for _, f := range hooks {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

func requireMain(t testing.TB) {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("testenv: the test binary must call testenv.Main from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }")
	}
}

// unavailable skips the test, or fails it under LEASEHOLD_REQUIRE_BACKENDS=1.
func unavailable(t testing.TB, reason string) {
	t.Helper()
	if required, _ := strconv.ParseBool(os.Getenv("LEASEHOLD_REQUIRE_BACKENDS")); required {
		t.Fatalf("testenv: %s (LEASEHOLD_REQUIRE_BACKENDS is set)", reason)
	}
	t.Skipf("testenv: %s", reason)
}

func shared(t testing.TB, k *kind) *Server {
	t.Helper()
	requireMain(t)
	sharedMu.Lock()
	slot := shareds[k]
	if slot == nil {
		slot = new(sharedSlot)
		shareds[k] = slot
	}
	sharedMu.Unlock()

	slot.mu.Lock()
	defer slot.mu.Unlock()
	if !slot.done {
		slot.s, slot.skip, slot.err = findShared(k)
		slot.done = true
		if slot.s != nil {
			slot.s.shared = true
			register(slot.s)
		}
	}
	switch {
	case slot.err != nil:
		t.Fatalf("testenv: shared %s: %v", k.name, slot.err)
	case slot.skip != "":
		unavailable(t, slot.skip)
	}
	if s := slot.s; s.src == fromBinary {
		// What the server said around a failure (a lease revoked late,
		// a slow disk) is the evidence a flaky test leaves.
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("testenv: the last lines of the shared %s server's logs:\n%s", k.name, s.logTails())
			}
		})
	}
	return slot.s
}

// findShared follows the lookup order: environment, binary, container.
func findShared(k *kind) (s *Server, skip string, err error) {
	if v := os.Getenv(k.envVar); v != "" {
		s, err = external(k, v, fromEnv)
		if err != nil {
			err = fmt.Errorf("%s=%s: %w", k.envVar, v, err)
		}
		return s, "", err
	}
	bin, findErr := k.find()
	if findErr == nil {
		s, err = startLocal(k, bin, config{members: 1})
		return s, "", err
	}
	if why := dockerUnavailable(); why == "" {
		s, err = startContainer(k)
		return s, "", err
	}
	return nil, fmt.Sprintf("no %s server: %v; install the Debian package %s, set %s=%s, or run a Docker engine",
		k.name, findErr, k.install, k.envVar, k.envForm), nil
}

func dedicated(t testing.TB, k *kind, opts []Option) *Server {
	t.Helper()
	requireMain(t)
	cfg := config{members: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.pgSettings) > 0 && k != postgresKind {
		t.Fatalf("testenv: New%s: PostgresSetting applies to NewPostgres only", k.short)
	}
	if cfg.members < 1 || (cfg.members > 1 && k == postgresKind) {
		t.Fatalf("testenv: New%s: Members(%d): only etcd and Redis take more than one member", k.short, cfg.members)
	}
	if cfg.peerProxies && k != etcdKind {
		t.Fatalf("testenv: New%s: PeerProxies applies to NewEtcd only", k.short)
	}
	if cfg.peerProxies && runtime.GOOS != "linux" {
		unavailable(t, "PeerProxies tells the members' connections apart from /proc: Linux only")
	}
	if err := cfg.checkReplication(k); err != nil {
		t.Fatalf("testenv: New%s: %v", k.short, err)
	}
	if v := os.Getenv(k.envVar); v != "" {
		unavailable(t, fmt.Sprintf("a dedicated %s server needs its binary, but %s=%s selects an external one; unset it to start one here", k.name, k.envVar, v))
	}
	bin, err := k.find()
	if err != nil {
		unavailable(t, fmt.Sprintf("a dedicated %s server needs its binary: %v; install the Debian package %s", k.name, err, k.install))
	}
	s, err := startLocal(k, bin, cfg)
	if err != nil {
		t.Fatalf("testenv: New%s: %v", k.short, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: logs of the dedicated %s server:\n%s", k.name, s.logTails())
		}
		if err := s.close(); err != nil {
			t.Errorf("testenv: stop %s: %v", k.name, err)
		}
	})
	return s
}
