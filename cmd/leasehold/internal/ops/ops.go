// Package ops gathers what the leasehold CLI and dashboard show — grants,
// semaphores, leaders, timers and jobs — from a backend opened by URL, in
// the shapes both print (tables, JSON, HTML), and carries out their
// operator actions: force-release a key, retry or purge a dead job.
//
// Everything it reads goes through lock.Inspector and jobs.Inspector and
// writes nothing; the actions are the only writes (jobs.Revive and
// jobs.Registry's Purge for the jobs).
package ops

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// ErrNoRegistry: the backend has no jobs registry (etcd), or none was
// configured.
var ErrNoRegistry = errors.New("no jobs registry")

// Config says what to open.
type Config struct {
	Backend   string        // backend URL (backend.Open)
	JobsURL   string        // jobs registry URL; "" for Backend's
	Namespace string        // redisjobs namespace ("" for its default)
	Table     string        // pgjobs table ("" for its default)
	Owner     string        // identity recorded by actions (jobs.Revive)
	Lease     time.Duration // the job lease the application's Runners use (heartbeat age); 0 for jobs.DefaultTTL
}

// Source is an opened backend and, when it has one, jobs registry.
type Source struct {
	Lock    lock.Lock
	Jobs    jobs.Registry // nil when JobsErr says why
	JobsErr error
	owner   string
	lease   time.Duration
	Now     func() time.Time // time.Now unless a test sets it
	closers []func() error

	jobsURL    string // the registry's URL (Config.JobsURL, or Backend)
	ownJobsURL bool   // the registry has a URL of its own (Config.JobsURL)
}

// JobsError is an error of the jobs registry, in opening it or in a call,
// so that a message can point at the right URL: Flag is "--jobs" when the
// registry has a URL of its own (Config.JobsURL), else "--backend"; URL is
// that URL as backend.Redact shows it.
type JobsError struct {
	Flag, URL string
	Err       error
}

func (e *JobsError) Error() string { return e.Err.Error() }
func (e *JobsError) Unwrap() error { return e.Err }

// jobsErr wraps an error of the registry in a JobsError.
func (s *Source) jobsErr(err error) error {
	if err == nil {
		return nil
	}
	var je *JobsError
	if errors.As(err, &je) {
		return err
	}
	flag := "--backend"
	if s.ownJobsURL {
		flag = "--jobs"
	}
	return &JobsError{Flag: flag, URL: backend.Redact(s.jobsURL), Err: backend.RedactError(err, s.jobsURL)}
}

// Open opens cfg's backend and jobs registry. A registry that cannot be
// opened is not an error here: the jobs views report JobsErr.
func Open(ctx context.Context, cfg Config) (*Source, error) {
	if cfg.Backend == "" {
		return nil, fmt.Errorf("%w: no backend URL", lock.ErrInvalidArgument)
	}
	l, closeLock, err := backend.Open(ctx, cfg.Backend, backend.WithCommon(lock.Common{Owner: cfg.Owner}))
	if err != nil {
		return nil, err
	}
	s := &Source{Lock: l, owner: cfg.Owner, lease: cfg.Lease, Now: time.Now, closers: []func() error{closeLock}}
	if s.lease <= 0 {
		s.lease = jobs.DefaultTTL
	}
	if s.owner == "" {
		s.owner = "leasehold-cli"
	}
	jobsURL := cfg.JobsURL
	if jobsURL == "" {
		jobsURL = cfg.Backend
	}
	reg, closeReg, err := OpenRegistry(ctx, jobsURL, cfg.Namespace, cfg.Table)
	s.jobsURL, s.ownJobsURL = jobsURL, cfg.JobsURL != ""
	if err != nil {
		s.JobsErr = s.jobsErr(err)
	} else {
		s.Jobs = reg
		s.closers = append(s.closers, closeReg)
	}
	return s, nil
}

// Close closes what Open opened.
func (s *Source) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}

var (
	memMu  sync.Mutex
	memReg = map[string]*memjobs.Registry{}
)

// OpenRegistry opens the jobs registry rawURL names: redis:// and
// rediss:// (redisjobs, in namespace), postgres:// and postgresql://
// (pgjobs, in table), mem://NAME (the in-process memjobs registry NAME,
// shared by every OpenRegistry of it in this process). etcd has no
// registry: ErrNoRegistry.
func OpenRegistry(ctx context.Context, rawURL, namespace, table string) (jobs.Registry, func() error, error) {
	r, closeFn, err := openRegistry(ctx, rawURL, namespace, table)
	return r, closeFn, backend.RedactError(err, rawURL)
}

func openRegistry(ctx context.Context, rawURL, namespace, table string) (jobs.Registry, func() error, error) {
	if !strings.Contains(rawURL, "://") {
		return nil, nil, fmt.Errorf("%w: jobs URL %s has no scheme (redis://, postgres://, mem://)", lock.ErrInvalidArgument, backend.Redact(rawURL))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: jobs URL %s: %w", lock.ErrInvalidArgument, backend.Redact(rawURL), cause(err))
	}
	switch u.Scheme {
	case "mem":
		memMu.Lock()
		defer memMu.Unlock()
		name := u.Host + u.Path
		r, ok := memReg[name]
		if !ok || name == "" {
			r = memjobs.New()
			memReg[name] = r
		}
		return r, func() error { return nil }, nil
	case "redis", "rediss", "redis+cluster", "redis+sentinel":
		c, err := backend.RedisClient(rawURL)
		if err != nil {
			return nil, nil, err
		}
		r, err := redisjobs.New(c, namespace)
		if err != nil {
			_ = c.Close()
			return nil, nil, err
		}
		return r, c.Close, nil
	case "postgres", "postgresql":
		cfg, err := pgxpool.ParseConfig(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: jobs URL %s: %w", lock.ErrInvalidArgument, backend.Redact(rawURL), cause(err))
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, backendkit.Unavailable("jobs registry: postgres", err)
		}
		r, err := pgjobs.New(pool, table)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return r, func() error { pool.Close(); return nil }, nil
	case "etcd":
		return nil, nil, fmt.Errorf("%w: etcd has no jobs registry (use --jobs redis://… or postgres://…)", ErrNoRegistry)
	}
	return nil, nil, fmt.Errorf("%w: jobs URL scheme %q is not one of mem, redis, rediss, redis+cluster, redis+sentinel, postgres", lock.ErrInvalidArgument, u.Scheme)
}

// cause returns the cause of a URL parser's error without the URL it
// quotes (password included).
func cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if c := pe.Unwrap(); c != nil {
			return c
		}
		return errors.New("cannot parse it")
	}
	return err
}
