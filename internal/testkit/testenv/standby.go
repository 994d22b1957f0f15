package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// standbyTopo is a PostgreSQL primary and a synchronous streaming standby
// (NewPostgres(t, Replicas(1))). Both members run with the same settings;
// whichever is the primary has synchronous_standby_names = '*' (set by
// ALTER SYSTEM once its standby streams), so that a commit returns only
// once the standby has it. The DSN names both hosts with
// target_session_attrs=read-write: clients reach whichever is the primary.
type standbyTopo struct {
	s      *Server
	binDir string
	cred   *syscall.Credential
}

// replicationSettings are those of both members.
var replicationSettings = []string{
	"wal_level=replica",
	"max_wal_senders=10",
	"hot_standby=on",
	"synchronous_commit=on",
	"wal_sender_timeout=5s",
	"wal_receiver_status_interval=1s",
}

func buildStandby(binDir, dir, template string, cred *syscall.Credential, cfg config) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Server{}
	t := &standbyTopo{s: s, binDir: binDir, cred: cred}
	var hosts []string
	for i := range 2 {
		mdir, err := memberDir(dir, i)
		if err != nil {
			return nil, err
		}
		if err := chownForPostgres(mdir, cred); err != nil {
			return nil, err
		}
		s.members = append(s.members, postgresNode(binDir, mdir, ports[i], cred, append(slices.Clone(replicationSettings), cfg.pgSettings...)))
		s.endpoints = append(s.endpoints, loopback(ports[i]))
		hosts = append(hosts, loopback(ports[i]))
	}
	if err := run([]string{"cp", "-a", template, t.data(0)}, "", nil); err != nil {
		return nil, err
	}
	s.addr = s.endpoints[0]
	s.dsn = "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&target_session_attrs=read-write"
	s.envValue = s.dsn
	s.topo = t
	// The standby is made from the running primary: it is not started
	// with the primary, but by form.
	standby := s.members[1]
	s.members = s.members[:1]
	s.form = func(ctx context.Context) error {
		standby.kind = s.kind
		s.members = append(s.members, standby)
		return t.attach(ctx, 0, 1)
	}
	return s, nil
}

// data is member i's data directory.
func (t *standbyTopo) data(i int) string { return filepath.Join(t.s.members[i].dir, "data") }

// attach makes member standby a fresh copy of member primary
// (pg_basebackup -R), starts it, and makes the primary wait for it on every
// commit.
func (t *standbyTopo) attach(ctx context.Context, primary, standby int) error {
	if err := os.RemoveAll(t.data(standby)); err != nil {
		return err
	}
	err := run([]string{filepath.Join(t.binDir, "pg_basebackup"),
		"-h", "127.0.0.1", "-p", portOf(t.s.endpoints[primary]), "-U", "postgres",
		"-D", t.data(standby), "-R", "-X", "stream", "-c", "fast", "--no-sync",
	}, t.s.members[standby].dir, t.cred)
	if err != nil {
		return err
	}
	if err := t.s.startMembers([]int{standby}); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, t.s.members[primary].target)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '*'"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	return waitFor(ctx, "the standby did not become synchronous", func(ctx context.Context) error {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'`).Scan(&n)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d synchronous standbys streaming", n)
		}
		if err == nil {
			// The primary has read the new setting once SHOW says so.
			var names string
			if err = conn.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&names); err == nil && names != "*" {
				err = fmt.Errorf("synchronous_standby_names is %q", names)
			}
		}
		return err
	})
}

// primaryIndex returns the member that is not in recovery.
func (t *standbyTopo) primaryIndex(ctx context.Context) (int, error) {
	for i, m := range t.s.members {
		if !m.running() {
			continue
		}
		conn, err := pgx.Connect(ctx, m.target)
		if err != nil {
			return 0, err
		}
		var recovering bool
		err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
		conn.Close(context.Background())
		if err != nil {
			return 0, err
		}
		if !recovering {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no member is the primary")
}

func (t *standbyTopo) primary(ctx context.Context, _ string) (string, error) {
	i, err := t.primaryIndex(ctx)
	if err != nil {
		return "", err
	}
	return t.s.endpoints[i], nil
}

func (t *standbyTopo) failover(ctx context.Context, how Failover, _ string) (string, error) {
	old, err := t.primaryIndex(ctx)
	if err != nil {
		return "", err
	}
	standby := 1 - old
	sig := syscall.SIGQUIT // immediate shutdown
	switch how {
	case Crash:
	case Handover:
		sig = syscall.SIGINT // fast shutdown: the standby has every commit
	default:
		return "", fmt.Errorf("unknown %v", how)
	}
	t.s.faultAt = time.Now()
	if err := t.s.members[old].stopWith(sig); err != nil {
		return "", err
	}
	err = run([]string{filepath.Join(t.binDir, "pg_ctl"), "promote", "-w", "-t", "60", "-D", t.data(standby)},
		t.s.members[standby].dir, t.cred)
	if err != nil {
		return "", err
	}
	err = waitFor(ctx, "the standby did not become the primary", func(ctx context.Context) error {
		i, err := t.primaryIndex(ctx)
		if err == nil && i != standby {
			err = fmt.Errorf("member %d is the primary", i)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	// The old primary comes back as the new one's standby, made afresh
	// (it may hold WAL the standby never had).
	if err := t.attach(ctx, standby, old); err != nil {
		return "", err
	}
	return t.s.endpoints[standby], nil
}

// portOf returns the port of host:port.
func portOf(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return port
}
