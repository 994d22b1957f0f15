// Package cli is the leasehold command: Run parses the arguments, opens the
// backend, and prints tables or JSON. cmd/leasehold's main only calls Run,
// so that tests run the command in-process.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/lock"
)

// Exit codes.
const (
	ExitOK       = 0 // success
	ExitFailed   = 1 // the operation failed: backend unreachable, backend error
	ExitUsage    = 2 // bad command line, a confirmation flag is missing, or no jobs registry on the backend
	ExitNotFound = 3 // nothing held, no leader, no such dead job
)

// Usage is the command's help text.
const Usage = `leasehold: inspect and operate leasehold locks, semaphores, elections, timers and jobs.

Usage:
  leasehold COMMAND [flags] [arguments]

Commands:
  locks [PREFIX]            grants of the keys that start with PREFIX: key, owner, token, remaining ttl
  semaphore NAME [--size N] slot occupancy of a semaphore (size from its participants' declarations, or --size)
  leader [NAME]             leader of election NAME (identity, term, since); without NAME, every election
  timers [PREFIX]           per timer: latest claimed tick and its host, runs in progress (cluster-wide view)
  jobs                      jobs in flight (owner, attempt, heartbeat age), expired and dead
  jobs retry ID             put a dead job back in flight; the application's recovery scan requeues it
  jobs purge ID --yes       delete a dead job for good
  release KEY --force       remove KEY's grant whoever holds it (the holder learns it lost the key)
  dashboard [--addr A]      serve a live web page with the same information (read-only unless --allow-actions)

Flags (every command):
  --backend URL   mem://NAME, redis://host:port, rediss://…, postgres://…, etcd://host:port,host:port
                  (default: $LEASEHOLD_BACKEND)
  --json          print JSON instead of tables, for scripts
  --timeout D     bound on the whole command (default 10s)
Jobs flags:
  --jobs URL      the jobs registry, when not on the backend (etcd has none): redis://… or postgres://…
  --namespace NS  redisjobs namespace (default leasehold:jobs)
  --table T       pgjobs table (default leasehold_jobs)
  --lease D       the job lease of the application's runners, for heartbeat ages (default 15s)

Exit codes:
  0  success
  1  the operation failed (backend unreachable or in error)
  2  usage error, or a required confirmation flag (--force, --yes) is missing
  3  not found: key not held, no leader, no such dead job
`

// common holds the flags every command has.
type common struct {
	backend, jobsURL, namespace, table string
	json                               bool
	timeout, lease                     time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.backend, "backend", os.Getenv("LEASEHOLD_BACKEND"), "backend URL")
	fs.StringVar(&c.jobsURL, "jobs", "", "jobs registry URL (default: the backend's)")
	fs.StringVar(&c.namespace, "namespace", "", "redisjobs namespace")
	fs.StringVar(&c.table, "table", "", "pgjobs table")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the command")
	fs.DurationVar(&c.lease, "lease", 0, "job lease of the application's runners")
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// env is one run of the command.
type env struct {
	stdout, stderr io.Writer
	c              common
	now            func() time.Time
}

// Run runs the command with args (without the program name) and returns
// its exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr, time.Now)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, Usage)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	e := &env{stdout: stdout, stderr: stderr, now: now}
	err := e.dispatch(ctx, args[0], args[1:])
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "leasehold: %v\nRun 'leasehold --help' for usage.\n", err)
		return ExitUsage
	case errors.Is(err, ops.ErrNoRegistry):
		fmt.Fprintf(stderr, "leasehold: %v\n", err)
		return ExitUsage
	case errors.Is(err, ops.ErrNotFound):
		fmt.Fprintf(stderr, "leasehold: %v\n", err)
		return ExitNotFound
	case errors.Is(err, lock.ErrUnavailable):
		fmt.Fprintf(stderr, "leasehold: %v\nIs the backend up and is --backend right (%s)?\n", err, redact(e.c.backend))
		return ExitFailed
	default:
		fmt.Fprintf(stderr, "leasehold: %v\n", err)
		return ExitFailed
	}
}

// redact hides a URL's password.
func redact(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		if j := strings.LastIndex(raw, "@"); j > i {
			if k := strings.Index(raw[i+3:j], ":"); k >= 0 {
				return raw[:i+3+k] + ":***" + raw[j:]
			}
		}
	}
	return raw
}

// parse parses flags anywhere among the arguments and returns the
// positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func (e *env) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("leasehold "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() { fmt.Fprint(e.stdout, Usage) }
	e.c.register(fs)
	return fs
}

// open opens the backend for a command.
func (e *env) open(ctx context.Context) (*ops.Source, error) {
	if e.c.backend == "" {
		return nil, usagef("no backend: pass --backend URL (mem://…, redis://host:port, postgres://…, etcd://host:port) or set LEASEHOLD_BACKEND")
	}
	src, err := ops.Open(ctx, ops.Config{Backend: e.c.backend, JobsURL: e.c.jobsURL, Namespace: e.c.namespace, Table: e.c.table, Lease: e.c.lease})
	if errors.Is(err, lock.ErrInvalidArgument) {
		return nil, usageError{err.Error()}
	}
	if err != nil {
		return nil, err
	}
	src.Now = e.now
	return src, nil
}

func nargs(pos []string, min, max int, what string) error {
	if len(pos) < min || len(pos) > max {
		return usagef("%s", what)
	}
	return nil
}

func (e *env) dispatch(ctx context.Context, cmd string, args []string) error {
	fs := e.flags(cmd)
	var size int
	var force, yes, allowActions, allowRemote bool
	var addr string
	switch cmd {
	case "semaphore":
		fs.IntVar(&size, "size", 0, "the semaphore's size")
	case "release":
		fs.BoolVar(&force, "force", false, "confirm: remove the grant whoever holds it")
	case "jobs":
		fs.BoolVar(&yes, "yes", false, "confirm a purge")
	case "dashboard":
		fs.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
		fs.BoolVar(&allowActions, "allow-actions", false, "enable retry and purge of dead jobs")
		fs.BoolVar(&allowRemote, "allow-remote", false, "allow a non-loopback listen address")
	case "locks", "leader", "timers":
	default:
		return usagef("unknown command %q", cmd)
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if cmd == "dashboard" {
		if err := nargs(pos, 0, 0, "dashboard takes no arguments"); err != nil {
			return err
		}
		return e.dashboard(ctx, addr, allowActions, allowRemote)
	}
	ctx, cancel := context.WithTimeout(ctx, e.c.timeout)
	defer cancel()
	src, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	switch cmd {
	case "locks":
		if err := nargs(pos, 0, 1, "usage: leasehold locks [PREFIX]"); err != nil {
			return err
		}
		return e.locks(ctx, src, first(pos))
	case "semaphore":
		if err := nargs(pos, 1, 1, "usage: leasehold semaphore NAME [--size N]"); err != nil {
			return err
		}
		return e.semaphore(ctx, src, pos[0], size)
	case "leader":
		if err := nargs(pos, 0, 1, "usage: leasehold leader [NAME]"); err != nil {
			return err
		}
		return e.leader(ctx, src, pos)
	case "timers":
		if err := nargs(pos, 0, 1, "usage: leasehold timers [PREFIX]"); err != nil {
			return err
		}
		return e.timers(ctx, src, first(pos))
	case "release":
		if err := nargs(pos, 1, 1, "usage: leasehold release KEY --force"); err != nil {
			return err
		}
		return e.release(ctx, src, pos[0], force)
	}
	return e.jobs(ctx, src, pos, yes)
}

func first(pos []string) string {
	if len(pos) == 0 {
		return ""
	}
	return pos[0]
}

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
