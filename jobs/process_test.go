package jobs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/backends"
	"github.com/leasehold-go/leasehold/internal/childproc"
	"github.com/leasehold-go/leasehold/internal/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
)

func TestMain(m *testing.M) {
	childMain()
	testenv.Main(m)
}

// store is a registry kind under test, with what a child needs to open it.
type store struct {
	name  string
	open  func(t testing.TB, ns string) jobs.Registry
	env   []string
	locks func(testing.TB) backends.Backend // the recovery election's backend
}

func stores(t *testing.T) []store {
	rs := testenv.Redis(t)
	ps := testenv.Postgres(t)
	return []store{
		{"redis", func(t testing.TB, ns string) jobs.Registry {
			c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			r, err := redisjobs.New(c, ns)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}, append(rs.Env(), "JOBS_STORE=redis"), backends.Redis},
		{"postgres", func(t testing.TB, ns string) jobs.Registry {
			pool, err := pgxpool.New(context.Background(), ps.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			r, err := pgjobs.New(pool, ns)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}, append(ps.Env(), "JOBS_STORE=postgres"), backends.Postgres},
	}
}

func storeFromEnv(ns string) (jobs.Registry, error) {
	switch os.Getenv("JOBS_STORE") {
	case "redis":
		return redisjobs.New(redis.NewClient(&redis.Options{Addr: os.Getenv("LEASEHOLD_REDIS_ADDR")}), ns)
	case "postgres":
		pool, err := pgxpool.New(context.Background(), os.Getenv("LEASEHOLD_PG_DSN"))
		if err != nil {
			return nil, err
		}
		return pgjobs.New(pool, ns)
	}
	return nil, fmt.Errorf("JOBS_STORE=%q", os.Getenv("JOBS_STORE"))
}

// fast is the configuration of the process tests: recovery in seconds.
var fast = []lock.Option{jobs.WithLease(time.Second), jobs.WithHeartbeatEvery(300 * time.Millisecond), jobs.WithScanEvery(200 * time.Millisecond),
	jobs.WithBackoff(0, 0)}

// Child processes: JOBS_CHILD=worker tracks JOBS_IDS and heartbeats them,
// printing "TRACKED <id>", "CANCELLED <id> <cause>", and on "DONE" from
// stdin "DONE <id> ok|stale". JOBS_CHILD=recoverer recovers, printing
// "REQUEUED <id> <attempt>", and kills itself with SIGKILL right after the
// step JOBS_KILL_AT of its first recovery.
func childMain() {
	childproc.Main("JOBS_CHILD", func() error { return child(os.Getenv("JOBS_CHILD")) })
}

func child(mode string) error {
	reg, err := storeFromEnv(os.Getenv("JOBS_NS"))
	if err != nil {
		return err
	}
	l, err := backends.FromEnv()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) { mu.Lock(); fmt.Printf(format+"\n", args...); mu.Unlock() }
	opts := append([]lock.Option{jobs.WithElection(os.Getenv("JOBS_NS"))}, fast...)
	if at := os.Getenv("JOBS_KILL_AT"); at != "" {
		opts = append(opts, jobs.OnStep(func(s jobs.Step, j jobs.Job) {
			if string(s) == at {
				say("DYING after %s of %s", s, j.ID)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}))
	}
	r, err := jobs.NewRunner(reg, l, func(_ context.Context, j jobs.Job, _ time.Duration) error {
		say("REQUEUED %s %d", j.ID, j.Attempt)
		return nil
	}, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if mode == "recoverer" {
		return r.Run(ctx)
	}
	go r.Run(ctx)
	var dones []func(error) error
	var ids []string
	for _, id := range strings.Split(os.Getenv("JOBS_IDS"), ",") {
		jctx, done, err := r.Track(ctx, jobs.Job{ID: id, Payload: []byte("work " + id)})
		if err != nil {
			return err
		}
		go func() {
			<-jctx.Done()
			say("CANCELLED %s %s", id, strings.ReplaceAll(fmt.Sprint(context.Cause(jctx)), "\n", " "))
		}()
		dones, ids = append(dones, done), append(ids, id)
		say("TRACKED %s", id)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "DONE" {
			for i, done := range dones {
				if err := done(nil); err != nil {
					say("DONE %s stale", ids[i])
				} else {
					say("DONE %s ok", ids[i])
				}
			}
		}
	}
	return nil
}

// recorder is the parent's requeue function.
type recorder struct {
	mu   sync.Mutex
	at   map[string][]time.Time
	last map[string]jobs.Job
}

func (r *recorder) requeue(_ context.Context, j jobs.Job, _ time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at, r.last = map[string][]time.Time{}, map[string]jobs.Job{}
	}
	r.at[j.ID] = append(r.at[j.ID], time.Now())
	r.last[j.ID] = j
	return nil
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at[id])
}

// runRecoverer runs a recovering Runner in the test process.
func runRecoverer(t *testing.T, reg jobs.Registry, l lock.Lock, ns string, rec *recorder) {
	r, err := jobs.NewRunner(reg, l, rec.requeue, append([]lock.Option{jobs.WithElection(ns)}, fast...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func eachStore(t *testing.T, f func(t *testing.T, s store, b backends.Backend)) {
	for _, s := range stores(t) {
		b := s.locks(t)
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, s, b)
		})
	}
}

var nsSeq atomic.Int64

// nsFor names a fresh registry (a Redis namespace, a PostgreSQL table).
func nsFor(t *testing.T) string {
	return fmt.Sprintf("jobs_test_%d_%d", os.Getpid(), nsSeq.Add(1))
}

// A worker SIGKILLed with jobs in flight: each is requeued within lease +
// scan interval + 1 s.
func TestKilledWorkersJobsAreRequeued(t *testing.T) {
	eachStore(t, func(t *testing.T, s store, b backends.Backend) {
		ns := nsFor(t)
		reg := s.open(t, ns)
		ids := []string{"j1", "j2", "j3", "j4", "j5"}
		w := childproc.Start(t, append(append(s.env, b.Env...), "JOBS_CHILD=worker", "JOBS_NS="+ns, "JOBS_IDS="+strings.Join(ids, ","))...)
		for range ids {
			w.Expect(t, "TRACKED", 30*time.Second)
		}
		var rec recorder
		runRecoverer(t, reg, b.New(t), ns, &rec)
		<-time.After(2 * time.Second) // two leases: the heartbeats keep the jobs
		for _, id := range ids {
			if rec.count(id) != 0 {
				t.Fatalf("%s requeued while its worker heartbeats", id)
			}
		}
		w.Signal(t, syscall.SIGKILL)
		killed := time.Now()
		bound := time.Second + 200*time.Millisecond + time.Second
		for _, id := range ids {
			for rec.count(id) == 0 && time.Since(killed) < 2*bound {
				<-time.After(10 * time.Millisecond)
			}
			rec.mu.Lock()
			at := rec.at[id]
			rec.mu.Unlock()
			if len(at) == 0 || at[0].Sub(killed) > bound {
				t.Fatalf("%s requeued at %v, want within lease + scan + 1 s = %v", id, at, bound)
			}
		}
		t.Logf("requeued %v after SIGKILL", rec.at["j5"][0].Sub(killed).Round(time.Millisecond))
	})
}

// A recovering process killed right after each step: no job is lost, and
// the duplicates are at most one per crash.
func TestRecovererKilledBetweenSteps(t *testing.T) {
	eachStore(t, func(t *testing.T, s store, b backends.Backend) {
		for _, step := range []jobs.Step{jobs.StepReclaimed, jobs.StepRequeued} {
			t.Run(string(step), func(t *testing.T) {
				ns := nsFor(t)
				reg := s.open(t, ns)
				ids := []string{"a", "b", "c"}
				for _, id := range ids {
					if _, err := reg.Track(t.Context(), jobs.Job{ID: id, Owner: "crashed-worker"}, 100*time.Millisecond); err != nil {
						t.Fatal(err)
					}
				}
				r := childproc.Start(t, append(append(s.env, b.Env...), "JOBS_CHILD=recoverer", "JOBS_NS="+ns, "JOBS_KILL_AT="+string(step))...)
				childRequeued := map[string]int{}
				for line := range r.Lines { // until the child dies
					var id string
					var attempt int
					if _, err := fmt.Sscanf(line, "REQUEUED %s %d", &id, &attempt); err == nil {
						childRequeued[id]++
					}
				}
				var rec recorder
				runRecoverer(t, reg, b.New(t), ns, &rec)
				deadline := time.Now().Add(10 * time.Second)
				for {
					c, err := reg.Counts(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					if c.Tracked == 0 || time.Now().After(deadline) {
						break
					}
					<-time.After(50 * time.Millisecond)
				}
				dups := 0
				for _, id := range ids {
					n := childRequeued[id] + rec.count(id)
					if n == 0 {
						t.Fatalf("job %s was lost (killed after %s)", id, step)
					}
					if n > 2 {
						t.Fatalf("job %s requeued %d times after one crash", id, n)
					}
					dups += n - 1
				}
				if c, _ := reg.Counts(t.Context()); c.Tracked != 0 {
					t.Fatalf("entries left: %+v", c)
				}
				t.Logf("killed after %s: every job requeued, %d duplicate(s)", step, dups)
			})
		}
	})
}

// A zombie worker (SIGSTOP past its lease, then SIGCONT): its job context
// is cancelled and its Done is rejected; the job was requeued meanwhile.
func TestZombieWorkerProcess(t *testing.T) {
	eachStore(t, func(t *testing.T, s store, b backends.Backend) {
		ns := nsFor(t)
		reg := s.open(t, ns)
		w := childproc.Start(t, append(append(s.env, b.Env...), "JOBS_CHILD=worker", "JOBS_NS="+ns, "JOBS_IDS=z")...)
		w.Expect(t, "TRACKED", 30*time.Second)
		var rec recorder
		runRecoverer(t, reg, b.New(t), ns, &rec)
		w.Signal(t, syscall.SIGSTOP)
		deadline := time.Now().Add(5 * time.Second)
		for rec.count("z") == 0 && time.Now().Before(deadline) {
			<-time.After(20 * time.Millisecond)
		}
		if rec.count("z") == 0 {
			t.Fatal("the stopped worker's job was not requeued within 5 s")
		}
		w.Signal(t, syscall.SIGCONT)
		cancelled := w.Expect(t, "CANCELLED z", 3*time.Second)
		t.Logf("zombie: %s", cancelled)
		w.Send(t, "DONE")
		if got := w.Expect(t, "DONE z", 3*time.Second); got != "DONE z stale" {
			t.Fatalf("the zombie's Done: %q, want rejected", got)
		}
	})
}

// A job that keeps crashing its worker ends in the dead set after
// MaxRetries with its history, and retrying it from the dead set works.
func TestPoisonJobOnRealRegistries(t *testing.T) {
	eachStore(t, func(t *testing.T, s store, b backends.Backend) {
		ns := nsFor(t)
		reg := s.open(t, ns)
		var rec recorder
		dead := make(chan jobs.DeadJob, 1)
		r, err := jobs.NewRunner(reg, b.New(t), rec.requeue, append(fast, jobs.WithElection(ns), jobs.WithMaxRetries(2),
			jobs.OnDead(func(_ context.Context, d jobs.DeadJob) { dead <- d }))...)
		if err != nil {
			t.Fatal(err)
		}
		// Each "worker" picks the job up as the queue gave it and crashes:
		// Track with no heartbeat.
		crash := func(j jobs.Job) {
			if _, err := reg.Track(t.Context(), j, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		crash(jobs.Job{ID: "poison", Payload: []byte("boom")})
		var d jobs.DeadJob
		for found := false; !found; {
			<-time.After(150 * time.Millisecond)
			before := rec.count("poison")
			r.Scan(t.Context())
			select {
			case d = <-dead:
				found = true
			default:
				if rec.count("poison") > before {
					rec.mu.Lock()
					j := rec.last["poison"]
					rec.mu.Unlock()
					crash(j)
				}
			}
		}
		if d.Attempt != 3 || len(d.History) != 3 || string(d.Payload) != "boom" {
			t.Fatalf("dead job %+v", d)
		}
		if listed, _ := reg.Dead(t.Context(), 10); len(listed) != 1 || listed[0].Reason == "" {
			t.Fatalf("dead set %+v", listed)
		}
		if err := r.RetryDead(t.Context(), "poison"); err != nil {
			t.Fatal(err)
		}
		if listed, _ := reg.Dead(t.Context(), 10); len(listed) != 0 {
			t.Fatalf("still dead after RetryDead: %+v", listed)
		}
		if rec.count("poison") != 3 {
			t.Fatalf("requeued %d times, want 2 recoveries + 1 retry", rec.count("poison"))
		}
	})
}
