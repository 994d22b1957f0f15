package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var postgresKind = &kind{
	name:    "PostgreSQL",
	short:   "Postgres",
	envVar:  "LEASEHOLD_PG_DSN",
	envForm: "postgres://user@host:port/db",
	install: "postgresql",
	stopSig: syscall.SIGQUIT, // immediate shutdown
	find:    findPostgres,
	build:   buildPostgres,
	parse:   parsePostgres,
	probe:   pingPostgres,
}

// findPostgres returns the directory holding postgres and initdb: the one of
// postgres on PATH, else the newest /usr/lib/postgresql/*/bin.
func findPostgres() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("postgres"); err == nil {
		// A link on PATH (/usr/local/bin/postgres) names the directory
		// that has the other binaries (pg_basebackup, pg_ctl).
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	installed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(binDir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
		return v
	}
	slices.SortFunc(installed, func(a, b string) int { return cmp.Compare(version(b), version(a)) })
	for _, dir := range append(dirs, installed...) {
		if isExecutable(filepath.Join(dir, "postgres")) && isExecutable(filepath.Join(dir, "initdb")) {
			if _, err := postgresCredential(); err != nil {
				return "", err
			}
			return dir, nil
		}
	}
	return "", errors.New("postgres and initdb not found on PATH or in /usr/lib/postgresql/*/bin")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// postgresCredential returns the credential of the postgres OS user when
// running as root (postgres and initdb refuse to run as root), else nil.
var postgresCredential = sync.OnceValues(func() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs the OS user postgres: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("OS user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
})

// chownForPostgres gives dir to the user postgres runs as.
func chownForPostgres(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(dir, int(cred.Uid), int(cred.Gid))
}

var pgTemplate struct {
	mu   sync.Mutex
	done bool
	data string
	err  error
}

// postgresTemplate runs initdb once per process; servers copy its result.
func postgresTemplate(binDir string, cred *syscall.Credential) (string, error) {
	pgTemplate.mu.Lock()
	defer pgTemplate.mu.Unlock()
	if pgTemplate.done {
		return pgTemplate.data, pgTemplate.err
	}
	pgTemplate.done = true
	pgTemplate.data, pgTemplate.err = func() (string, error) {
		dir, err := makeTempDir("pgtemplate")
		if err != nil {
			return "", err
		}
		atShutdown(func() error { return os.RemoveAll(dir) })
		if err := chownForPostgres(dir, cred); err != nil {
			return "", err
		}
		data := filepath.Join(dir, "data")
		err = run([]string{filepath.Join(binDir, "initdb"),
			"-D", data, "-U", "postgres", "--auth=trust",
			"-E", "UTF8", "--locale=C", "--no-sync",
		}, dir, cred)
		return data, err
	}()
	return pgTemplate.data, pgTemplate.err
}

// PostgresSetting makes NewPostgres start the server with a configuration
// parameter set (postgres -c name=value), for example
// PostgresSetting("max_locks_per_transaction", "10").
func PostgresSetting(name, value string) Option {
	return func(c *config) { c.pgSettings = append(c.pgSettings, name+"="+value) }
}

func buildPostgres(binDir, dir string, cfg config) (*Server, error) {
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	template, err := postgresTemplate(binDir, cred)
	if err != nil {
		return nil, err
	}
	if err := chownForPostgres(dir, cred); err != nil {
		return nil, err
	}
	if cfg.replicas > 0 {
		return buildStandby(binDir, dir, template, cred, cfg)
	}
	data := filepath.Join(dir, "data")
	if err := run([]string{"cp", "-a", template, data}, "", nil); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	p := postgresNode(binDir, dir, ports[0], cred, append([]string{"synchronous_commit=off"}, cfg.pgSettings...))
	return &Server{
		addr:      loopback(ports[0]),
		dsn:       p.target,
		endpoints: []string{loopback(ports[0])},
		envValue:  p.target,
		members:   []*proc{p},
	}, nil
}

// postgresDSN is the connection string of the server at addr.
func postgresDSN(addr string) string {
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// postgresNode is one postmaster on port, its data in dir/data, its Unix
// socket in dir, with the given settings (name=value) after the common
// ones.
func postgresNode(binDir, dir string, port int, cred *syscall.Credential, settings []string) *proc {
	addr := loopback(port)
	argv := []string{filepath.Join(binDir, "postgres"),
		"-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(port),
		"-k", dir, // Unix socket directory
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	}
	for _, s := range settings {
		argv = append(argv, "-c", s)
	}
	return &proc{
		name:    "PostgreSQL " + addr,
		argv:    argv,
		dir:     dir,
		logPath: filepath.Join(dir, "postgres.log"),
		cred:    cred,
		target:  postgresDSN(addr),
		port:    port,
	}
}

func parsePostgres(value string) (*Server, error) {
	cfg, err := pgconn.ParseConfig(value)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	return &Server{addr: addr, dsn: value, endpoints: []string{addr}, target: value}, nil
}

// pingPostgres connects and runs SELECT 1.
func pingPostgres(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}
