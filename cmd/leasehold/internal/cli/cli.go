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
	"net"
	"os"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/semaphore"
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
  semaphore NAME [--size N] slot occupancy of a semaphore (size from its participants' declarations, or --size 1…4096)
  leader [NAME]             leader of election NAME (owner, term, since); without NAME, every election
  timers [PREFIX]           per timer: latest claimed tick and its host, runs in progress (cluster-wide view)
  jobs                      jobs in flight (owner, attempt, heartbeat age), expired and dead
  jobs retry ID             put a dead job back in flight; the application's recovery scan requeues it
  jobs purge ID --yes       delete a dead job for good
  release KEY --force       remove KEY's grant whoever holds it (the holder learns it lost the key)
  dashboard [--addr A]      serve a live web page with the same information (read-only unless --allow-actions)

Flags (every command):
  --backend URL   mem://NAME, redis://[:password@]host:port, rediss://…, redis+cluster://[:password@]host:port,…,
                  postgres://…, etcd://[user:password@]host:port,host:port   (default: $LEASEHOLD_BACKEND)
  --json          print JSON instead of tables, for scripts (errors too: {"error", "kind", "exit", "hint"} on stdout)
  --timeout D     bound on the whole command (default 10s, at most 24h)
  --limit N       rows per table, and jobs of each kind listed (default 100, at most 1000)
Jobs flags:
  --jobs URL      the jobs registry, when not on the backend (etcd has none): redis://… or postgres://…
  --namespace NS  redisjobs namespace (default leasehold:jobs)
  --table T       pgjobs table (default leasehold_jobs)
  --lease D       the job lease of the application's runners, for heartbeat ages (default 15s)
Dashboard flags:
  --addr A          listen address (default 127.0.0.1:8080; it answers only to 127.0.0.1, localhost and [::1])
  --allow-actions   enable retry and purge of dead jobs
  --allow-remote    allow any listen address and Host; every request then needs the access token of the
                    URL printed at start (…/?token=…)

Keys, owners, IDs and reasons that have a non-printable character (a control character, invalid
UTF-8) or start with a double quote are shown quoted, as Go's strconv.Quote does; KEY and ID arguments that
start with a double quote are read that way: leasehold jobs retry '"job\x00one"'.

Exit codes:
  0  success
  1  the operation failed (backend unreachable or in error, or --timeout reached)
  2  usage error (a bad flag, argument, URL or name), or a required confirmation flag (--force, --yes) is missing
  3  not found: key not held, no leader, no such dead job
`

// common holds the flags every command has.
type common struct {
	backend, jobsURL, namespace, table string
	json                               bool
	timeout, lease                     time.Duration
	limit                              int
}

// MaxTimeout is the longest --timeout.
const MaxTimeout = 24 * time.Hour

func (c *common) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.backend, "backend", getenv("LEASEHOLD_BACKEND"), "backend URL")
	fs.StringVar(&c.jobsURL, "jobs", "", "jobs registry URL (default: the backend's)")
	fs.StringVar(&c.namespace, "namespace", "", "redisjobs namespace")
	fs.StringVar(&c.table, "table", "", "pgjobs table")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on the command")
	fs.DurationVar(&c.lease, "lease", 0, "job lease of the application's runners")
	fs.IntVar(&c.limit, "limit", 100, "rows per table")
}

// check validates the common flags.
func (c *common) check() error {
	switch {
	case c.timeout <= 0 || c.timeout > MaxTimeout:
		return usagef("--timeout %v must be positive and at most %v", c.timeout, MaxTimeout)
	case c.lease < 0 || c.lease > lock.MaxTTL:
		return usagef("--lease %v must be in [0, %v]", c.lease, lock.MaxTTL)
	}
	if err := ops.CheckLimit(c.limit); err != nil {
		return usagef("--limit %d must be in [1, %d]", c.limit, ops.MaxLimit)
	}
	return nil
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// command is a parsed command line.
type command struct {
	name string
	pos  []string // positional arguments, keys and IDs decoded (ops.ParseArg)
	c    common

	size                      int // semaphore --size; 0 when not given
	force, yes                bool
	addr                      string
	allowActions, allowRemote bool
}

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
	cmd, err := parseCommand(args, os.Getenv)
	if err == nil {
		e.c = cmd.c
		err = e.exec(ctx, cmd)
	} else {
		e.c.json = wantsJSON(args)
	}
	return e.report(err)
}

// wantsJSON reports whether args ask for JSON, for the error of a command
// line that did not parse.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--json", "-json", "--json=true", "-json=true", "--json=1", "-json=1":
			return true
		}
	}
	return false
}

// Exit code kinds, in the "kind" field of a JSON error.
const (
	kindUsage       = "usage"
	kindNotFound    = "not_found"
	kindUnavailable = "unavailable"
	kindTimeout     = "timeout"
	kindFailed      = "failed"
)

// classify returns err's exit code, kind and a hint for the user.
func (e *env) classify(err error) (code int, kind, hint string) {
	var ue usageError
	var je *ops.JobsError
	switch {
	case errors.As(err, &ue):
		return ExitUsage, kindUsage, "Run 'leasehold --help' for usage."
	case errors.Is(err, ops.ErrNoRegistry):
		return ExitUsage, kindUsage, ""
	case errors.Is(err, ops.ErrNotFound):
		return ExitNotFound, kindNotFound, ""
	case errors.Is(err, lock.ErrInvalidArgument):
		return ExitUsage, kindUsage, "Run 'leasehold --help' for usage."
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, lock.ErrUnavailable):
		return ExitFailed, kindTimeout, fmt.Sprintf("The command did not finish within --timeout %v.", e.c.timeout)
	case errors.As(err, &je) && errors.Is(err, lock.ErrUnavailable):
		return ExitFailed, kindUnavailable, fmt.Sprintf("Is the jobs registry up and is %s right (%s)?", je.Flag, je.URL)
	case errors.Is(err, lock.ErrUnavailable):
		return ExitFailed, kindUnavailable, fmt.Sprintf("Is the backend up and is --backend right (%s)?", backend.Redact(e.c.backend))
	}
	return ExitFailed, kindFailed, ""
}

// report prints err (on stderr, or under --json as a JSON object on
// stdout) and returns the exit code.
func (e *env) report(err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.stdout, Usage)
		return ExitOK
	}
	code, kind, hint := e.classify(err)
	msg := err.Error()
	if e.c.json {
		_ = e.printJSON(jsonError{Error: msg, Kind: kind, Exit: code, Hint: hint})
		return code
	}
	// An error may quote what the user or the backend passed: shown
	// quoted when it has a character a terminal would act on.
	fmt.Fprintf(e.stderr, "leasehold: %s\n", ops.Show(msg))
	if hint != "" {
		fmt.Fprintln(e.stderr, hint)
	}
	return code
}

// jsonError is an error under --json.
type jsonError struct {
	Error string `json:"error"`
	Kind  string `json:"kind"` // usage, not_found, unavailable, timeout, failed
	Exit  int    `json:"exit"`
	Hint  string `json:"hint,omitempty"`
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

// parseCommand turns a command line into a command, validating every flag
// and argument; it opens nothing. Its errors are usage errors (exit 2).
func parseCommand(args []string, getenv func(string) string) (*command, error) {
	cmd := &command{name: args[0]}
	fs := flag.NewFlagSet("leasehold "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by report
	fs.Usage = func() {}
	cmd.c.register(fs, getenv)
	var size int
	switch cmd.name {
	case "semaphore":
		fs.IntVar(&size, "size", 0, "the semaphore's size")
	case "release":
		fs.BoolVar(&cmd.force, "force", false, "confirm: remove the grant whoever holds it")
	case "jobs":
		fs.BoolVar(&cmd.yes, "yes", false, "confirm a purge")
	case "dashboard":
		fs.StringVar(&cmd.addr, "addr", "127.0.0.1:8080", "listen address")
		fs.BoolVar(&cmd.allowActions, "allow-actions", false, "enable retry and purge of dead jobs")
		fs.BoolVar(&cmd.allowRemote, "allow-remote", false, "allow a non-loopback listen address")
	case "locks", "leader", "timers":
	default:
		return nil, usagef("unknown command %.64q", cmd.name)
	}
	pos, err := parse(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, helpError{}
		}
		return nil, err
	}
	if err := cmd.c.check(); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "size" && (size < 1 || size > semaphore.MaxSize) {
			err = usagef("--size %d must be in [1, %d]", size, semaphore.MaxSize)
		}
	})
	if err != nil {
		return nil, err
	}
	cmd.size = size
	cmd.pos, err = cmd.args(pos)
	return cmd, err
}

// helpError is --help after a command: the usage is printed, exit 0.
type helpError struct{}

func (helpError) Error() string { return "help requested" }
func (helpError) Unwrap() error { return flag.ErrHelp }

// args checks the positional arguments of cmd and decodes its keys and IDs.
func (cmd *command) args(pos []string) ([]string, error) {
	n := func(min, max int, usage string) error {
		if len(pos) < min || len(pos) > max {
			return usagef("usage: leasehold %s", usage)
		}
		return nil
	}
	usage := func(err error) error {
		if err != nil {
			return usageError{err.Error()}
		}
		return nil
	}
	var err error
	switch cmd.name {
	case "dashboard":
		if _, port, err := net.SplitHostPort(cmd.addr); err != nil || port == "" {
			return nil, usagef("--addr %.64q is not host:port (for example 127.0.0.1:8080)", cmd.addr)
		}
		return pos, n(0, 0, "dashboard [--addr A] [--allow-actions] [--allow-remote] (no arguments)")
	case "locks", "timers":
		if err := n(0, 1, cmd.name+" [PREFIX]"); err != nil {
			return nil, err
		}
		if len(pos) == 1 {
			if pos[0], err = ops.ParseArg("prefix", pos[0]); err != nil {
				return nil, usage(err)
			}
			if len(pos[0]) > lock.MaxKeyLen {
				return nil, usagef("the prefix is %d bytes, longer than any key (%d)", len(pos[0]), lock.MaxKeyLen)
			}
		}
	case "semaphore":
		if err := n(1, 1, "semaphore NAME [--size N]"); err != nil {
			return nil, err
		}
		return pos, usage(backendkit.CheckName("semaphore name", pos[0]))
	case "leader":
		if err := n(0, 1, "leader [NAME]"); err != nil {
			return nil, err
		}
		if len(pos) == 1 {
			return pos, usage(backendkit.CheckName("election name", pos[0]))
		}
	case "release":
		if err := n(1, 1, "release KEY --force"); err != nil {
			return nil, err
		}
		if pos[0], err = ops.ParseArg("key", pos[0]); err != nil {
			return nil, usage(err)
		}
		return pos, usage(lock.CheckKey(pos[0]))
	case "jobs":
		if len(pos) == 0 {
			return pos, nil
		}
		if len(pos) != 2 || (pos[0] != "retry" && pos[0] != "purge") {
			return nil, usagef("usage: leasehold jobs [retry ID | purge ID --yes]")
		}
		if pos[1], err = ops.ParseArg("job ID", pos[1]); err != nil {
			return nil, usage(err)
		}
		if err := lock.CheckKey(pos[1]); err != nil {
			return nil, usagef("job ID: %v", err)
		}
		if pos[0] == "purge" && !cmd.yes {
			return nil, usagef("--yes is required to purge: it deletes dead job %s for good (or use 'leasehold jobs retry')", ops.Show(pos[1]))
		}
	}
	return pos, nil
}

// open opens the backend for a command.
func (e *env) open(ctx context.Context) (*ops.Source, error) {
	if e.c.backend == "" {
		return nil, usagef("no backend: pass --backend URL (mem://…, redis://host:port, postgres://…, etcd://host:port) or set LEASEHOLD_BACKEND")
	}
	src, err := ops.Open(ctx, ops.Config{Backend: e.c.backend, JobsURL: e.c.jobsURL, Namespace: e.c.namespace, Table: e.c.table, Lease: e.c.lease})
	if err != nil {
		return nil, err
	}
	src.Now = e.now
	return src, nil
}

// exec runs a parsed command.
func (e *env) exec(ctx context.Context, cmd *command) error {
	if cmd.name == "dashboard" {
		return e.dashboard(ctx, cmd.addr, cmd.allowActions, cmd.allowRemote)
	}
	ctx, cancel := context.WithTimeout(ctx, e.c.timeout)
	defer cancel()
	src, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	pos := cmd.pos
	switch cmd.name {
	case "locks":
		return e.locks(ctx, src, first(pos))
	case "semaphore":
		return e.semaphore(ctx, src, pos[0], cmd.size)
	case "leader":
		return e.leader(ctx, src, pos)
	case "timers":
		return e.timers(ctx, src, first(pos))
	case "release":
		return e.release(ctx, src, pos[0], cmd.force)
	}
	return e.jobs(ctx, src, pos)
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
