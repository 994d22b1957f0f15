package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
)

// queue is the user's job queue, which leasehold does not provide: a job
// pushed with a delay is popped no sooner. Like most queues it keeps only
// a job's ID and payload: the registry keeps the count of its recoveries
// by ID (jobs.JobFrom reads it back when the job is tracked again).
type queue interface {
	push(ctx context.Context, j jobs.Job, delay time.Duration) error
	pop(ctx context.Context) (jobs.Job, bool) // false: none ready now (after a short wait)
}

// encode and decode are how the queues store a job.
func encode(j jobs.Job) ([]byte, error) {
	return json.Marshal(jobs.Job{ID: j.ID, Payload: j.Payload})
}

func decode(b []byte) (jobs.Job, bool) {
	var j jobs.Job
	return j, json.Unmarshal(b, &j) == nil
}

// idle is how long pop waits when no job is ready.
const idle = 20 * time.Millisecond

// memQueue is the in-memory queue.
type memQueue chan jobs.Job

func (q memQueue) push(_ context.Context, j jobs.Job, delay time.Duration) error {
	j = jobs.Job{ID: j.ID, Payload: j.Payload} // as the other queues keep it
	time.AfterFunc(delay, func() { q <- j })
	return nil
}

func (q memQueue) pop(ctx context.Context) (jobs.Job, bool) {
	if ctx.Err() != nil {
		return jobs.Job{}, false
	}
	select {
	case j := <-q:
		return j, true
	case <-time.After(idle):
	case <-ctx.Done():
	}
	return jobs.Job{}, false
}

// redisQueue is a sorted set of encoded jobs by the time they are due.
type redisQueue struct {
	c   redis.UniversalClient
	key string
}

func (q redisQueue) push(ctx context.Context, j jobs.Job, delay time.Duration) error {
	b, err := encode(j)
	if err != nil {
		return err
	}
	return q.c.ZAdd(ctx, q.key, redis.Z{Score: float64(time.Now().Add(delay).UnixMilli()), Member: b}).Err()
}

// popDue removes and returns the first job due by ARGV[1] (ms).
var popDue = redis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1)
if due[1] then redis.call('ZREM', KEYS[1], due[1]) return due[1] end
return false`)

func (q redisQueue) pop(ctx context.Context) (jobs.Job, bool) {
	if ctx.Err() != nil {
		return jobs.Job{}, false
	}
	b, err := popDue.Run(ctx, q.c, []string{q.key}, time.Now().UnixMilli()).Text()
	if err != nil { // none due (redis.Nil), or unreachable: look again soon
		sleep(ctx, idle)
		return jobs.Job{}, false
	}
	return decode([]byte(b))
}

// pgQueue is a table of encoded jobs by the time they are due.
type pgQueue struct {
	pool  *pgxpool.Pool
	table string
}

func (q pgQueue) push(ctx context.Context, j jobs.Job, delay time.Duration) error {
	b, err := encode(j)
	if err != nil {
		return err
	}
	_, err = q.pool.Exec(ctx, `INSERT INTO `+q.table+` (job, due) VALUES ($1, now() + $2::bigint * interval '1 millisecond')`, b, delay.Milliseconds())
	return err
}

func (q pgQueue) pop(ctx context.Context) (jobs.Job, bool) {
	if ctx.Err() != nil {
		return jobs.Job{}, false
	}
	var b []byte
	err := q.pool.QueryRow(ctx, `DELETE FROM `+q.table+` WHERE id = (SELECT id FROM `+q.table+`
WHERE due <= now() ORDER BY due, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING job`).Scan(&b)
	if err != nil { // none due (pgx.ErrNoRows), or unreachable: look again soon
		sleep(ctx, idle)
		return jobs.Job{}, false
	}
	return decode(b)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// store is a backend's registry and queue, and how its workers run: as
// goroutines sharing them (memory), or as processes of their own.
type store struct {
	reg   jobs.Registry
	q     queue
	close func()
	mem   bool
}

var (
	memMu     sync.Mutex
	memStores = map[string]store{}
)

// openStore opens the registry and the queue of namespace ns on the backend
// url names.
func openStore(ctx context.Context, rawURL, ns string) (store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return store{}, fmt.Errorf("backend URL %s: cannot parse it", backend.Redact(rawURL))
	}
	switch u.Scheme {
	case "mem":
		memMu.Lock()
		defer memMu.Unlock()
		st, ok := memStores[ns]
		if !ok {
			st = store{reg: memjobs.New(), q: make(memQueue, 1000), mem: true, close: func() {
				memMu.Lock()
				defer memMu.Unlock()
				delete(memStores, ns)
			}}
			memStores[ns] = st
		}
		return st, nil
	case "redis", "rediss", "redis+sentinel":
		c, err := backend.RedisClient(rawURL) // as backend.Open makes it
		if err != nil {
			return store{}, err
		}
		reg, err := redisjobs.New(c, ns)
		if err != nil {
			_ = c.Close()
			return store{}, err
		}
		return store{reg: reg, q: redisQueue{c, ns + ":queue"}, close: func() { _ = c.Close() }}, nil
	case "postgres", "postgresql":
		pool, err := pgxpool.New(ctx, rawURL)
		if err != nil {
			return store{}, fmt.Errorf("backend URL %s: %w", backend.Redact(rawURL), err)
		}
		reg, err := pgjobs.New(pool, ns)
		if err != nil {
			pool.Close()
			return store{}, err
		}
		q := pgQueue{pool, ns + "_queue"}
		if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q.table+` (id bigserial PRIMARY KEY, job bytea NOT NULL, due timestamptz NOT NULL)`); err != nil {
			pool.Close()
			return store{}, err
		}
		return store{reg: reg, q: q, close: pool.Close}, nil
	case "etcd":
		return store{}, fmt.Errorf("%w: etcd has no jobs registry (jobs need redis://, postgres:// or mem://; etcd serves the locks, leader and timers examples)", lock.ErrInvalidArgument)
	}
	return store{}, fmt.Errorf("%w: backend URL scheme %q is not one of mem, redis, rediss, postgres", lock.ErrInvalidArgument, u.Scheme)
}

// openLock opens the lock of the recovery election, as worker name.
func openLock(ctx context.Context, rawURL, name string) (lock.Lock, func() error, error) {
	return backend.Open(ctx, rawURL, backend.WithCommon(lock.Common{Owner: name}))
}

// startWorker starts the worker called name: a goroutine over this store
// in memory, else this program run again with -worker. Its stop ends it
// as a shutdown would (SIGTERM).
func (st store) startWorker(ctx context.Context, rawURL, ns, name string) (io.Reader, func() error, func(), error) {
	if !st.mem {
		return startProcess(ctx, rawURL, ns, name)
	}
	l, closeLock, err := openLock(ctx, rawURL, name)
	if err != nil {
		return nil, nil, nil, err
	}
	wctx, kill := context.WithCancel(ctx)
	r, w := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		// A killed worker's goroutines stop at once: its jobs are neither
		// heartbeated (their contexts end) nor finished.
		err := worker(wctx, name, env{reg: st.reg, q: st.q, l: l, out: w, ns: ns, die: kill})
		_ = closeLock()
		_ = w.Close()
		ended <- err
	}()
	return r, func() error { return <-ended }, kill, nil
}

func startProcess(ctx context.Context, rawURL, ns, name string) (io.Reader, func() error, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-worker", name, "-ns", ns, "-backend", rawURL)
	cmd.Cancel = func() error { return cmd.Process.Kill() } // the supervisor's deadline
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return out, cmd.Wait, func() { _ = cmd.Process.Signal(syscall.SIGTERM) }, nil
}

// workerMain is a worker process: it works until SIGTERM, or until the
// poison job kills it with SIGKILL.
func workerMain(rawURL, ns, name string) error {
	ctx, stop := signalContext()
	defer stop()
	st, err := openStore(ctx, rawURL, ns)
	if err != nil {
		return err
	}
	defer st.close()
	l, closeLock, err := openLock(ctx, rawURL, name)
	if err != nil {
		return err
	}
	defer func() { _ = closeLock() }()
	die := func() {
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill() // SIGKILL: no deferred call, no done, no more heartbeats
		select {}
	}
	return worker(ctx, name, env{reg: st.reg, q: st.q, l: l, out: os.Stdout, ns: ns, die: die})
}

func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
