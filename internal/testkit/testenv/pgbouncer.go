package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

var pgbouncerKind = &kind{
	name:    "PgBouncer",
	short:   "PgBouncer",
	envVar:  "LEASEHOLD_PG_DSN", // a child process connects through the pooler
	envForm: "postgres://user@host:port/db",
	install: "pgbouncer",
	stopSig: syscall.SIGTERM, // immediate shutdown
	probe:   pingPostgres,
}

// findPgBouncer returns the pgbouncer binary: on PATH, or where Debian puts
// it (/usr/sbin, not on every user's PATH).
func findPgBouncer() (string, error) {
	if p, err := lookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if isExecutable("/usr/sbin/pgbouncer") {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer not found on PATH or in /usr/sbin")
}

// NewPgBouncer starts a PgBouncer in front of the PostgreSQL server pg, for
// this test only, in the given pool mode ("session", "transaction" or
// "statement"), and returns it as a Server: its DSN and Env lead through the
// pooler to pg's postgres database as the user postgres (trust
// authentication). It is stopped by t.Cleanup. Without the pgbouncer
// binary (Debian package pgbouncer) the test is skipped, or fails under
// LEASEHOLD_REQUIRE_BACKENDS=1.
func NewPgBouncer(t testing.TB, pg *Server, mode string) *Server {
	t.Helper()
	requireMain(t)
	switch mode {
	case "session", "transaction", "statement":
	default:
		t.Fatalf("testenv: NewPgBouncer: pool mode %q: want session, transaction or statement", mode)
	}
	if pg == nil || pg.kind != postgresKind {
		t.Fatalf("testenv: NewPgBouncer needs a PostgreSQL server")
	}
	bin, err := findPgBouncer()
	if err != nil {
		unavailable(t, fmt.Sprintf("a PgBouncer needs its binary: %v; install the Debian package pgbouncer", err))
	}
	var s *Server
	for range 3 {
		if s, err = startPgBouncer(bin, pg.Addr(), mode); err == nil || !errors.Is(err, errPortInUse) {
			break
		}
	}
	if err != nil {
		t.Fatalf("testenv: NewPgBouncer: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: logs of the PgBouncer:\n%s", s.logTails())
		}
		if err := s.close(); err != nil {
			t.Errorf("testenv: stop PgBouncer: %v", err)
		}
	})
	return s
}

func startPgBouncer(bin, upstream, mode string) (*Server, error) {
	upHost, upPort, err := net.SplitHostPort(upstream)
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential() // pgbouncer refuses to run as root too
	if err != nil {
		return nil, err
	}
	dir, err := makeTempDir("pgbouncer")
	if err != nil {
		return nil, err
	}
	if err := chownForPostgres(dir, cred); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	users := filepath.Join(dir, "users.txt")
	ini := filepath.Join(dir, "pgbouncer.ini")
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 500
default_pool_size = 20
`, upHost, upPort, ports[0], users, mode)
	if err := os.WriteFile(users, []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := os.WriteFile(ini, []byte(conf), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	addr := loopback(ports[0])
	dsn := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	s := &Server{
		kind: pgbouncerKind, src: fromBinary, dir: dir,
		addr: addr, dsn: dsn, endpoints: []string{addr}, envValue: dsn,
		members: []*proc{{
			kind:    pgbouncerKind,
			name:    "PgBouncer " + addr + " (" + mode + " mode) in front of " + upstream,
			argv:    []string{bin, ini},
			dir:     dir,
			logPath: filepath.Join(dir, "pgbouncer.log"),
			cred:    cred,
			target:  dsn,
			port:    ports[0],
		}},
	}
	register(s)
	if err := s.startMembers(s.all()); err != nil {
		return nil, errors.Join(err, s.close())
	}
	return s, nil
}
