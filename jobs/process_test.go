package jobs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/backends"
	"github.com/leasehold-go/leasehold/internal/testkit/childproc"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/pgjobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/lock"
)

func TestMain(m *testing.M) {
	childMain()
	testenv.Main(m)
}

// listed is a registry with its operator view, which the tests read.
type listed interface {
	jobs.Registry
	jobs.Inspector
}

// store is a registry kind under test, with what a child needs to open it.
type store struct {
	name  string
	open  func(t testing.TB, ns string) listed
	env   []string
	locks func(testing.TB) backends.Backend // the recovery election's backend
}

func stores(t *testing.T) []store {
	rs := testenv.Redis(t)
	ps := testenv.Postgres(t)
	return []store{
		{"redis", func(t testing.TB, ns string) listed {
			c := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			r, err := redisjobs.New(c, ns)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}, append(rs.Env(), "JOBS_STORE=redis"), backends.Redis},
		{"postgres", func(t testing.TB, ns string) listed {
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
var fast = []jobs.Option{jobs.WithTTL(time.Second), jobs.WithHeartbeatInterval(300 * time.Millisecond), jobs.WithScanInterval(200 * time.Millisecond),
	jobs.WithRetryBackoff(0, 0)}

// Child processes. JOBS_CHILD=worker tracks the jobs JOBS_IDS through a
// Runner and prints "TRACKED <id> <owner> <attempt>", "HEARTBEAT lost=<ids>"
// after each heartbeat of its Runner, "CANCELLED <id> stale|lost|other
// <cause>" when a job's context ends; on stdin "HB" it sends a heartbeat of
// its jobs itself, through the registry, printing "HB <id> ok|lost", and on
// "DONE" it finishes them, printing "DONE <id> ok|stale". JOBS_JOB (a job
// in JSON) replaces JOBS_IDS with that one job as a queue handed it over,
// attempt and history included. JOBS_CHILD=recoverer recovers, printing
// "REQUEUED <id> <attempt>", and kills itself with SIGKILL right after the
// step JOBS_KILL_AT of its first recovery, printing "DYING after <step> of
// <id>" first.
func childMain() {
	childproc.Main("JOBS_CHILD", func() error { return child(os.Getenv("JOBS_CHILD")) })
}

// tracking is the child's registry: it remembers the epoch of each job the
// Runner tracked (for HB) and reports the Runner's heartbeats.
type tracking struct {
	jobs.Registry
	say func(format string, args ...any)

	mu   sync.Mutex
	refs []jobs.Ref
}

func (r *tracking) Track(ctx context.Context, job jobs.Job, lease time.Duration) (jobs.Job, error) {
	j, err := r.Registry.Track(ctx, job, lease)
	if err == nil {
		r.mu.Lock()
		r.refs = append(r.refs, j.Ref())
		r.mu.Unlock()
	}
	return j, err
}

func (r *tracking) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	lost, err := r.Registry.Heartbeat(ctx, refs, lease)
	if err == nil {
		r.say("HEARTBEAT lost=%s", strings.Join(lost, ","))
	}
	return lost, err
}

// batchedTracking is tracking that passes on ReclaimEach and RemoveEach:
// its Runner recovers in batches.
type batchedTracking struct {
	*tracking
	jobs.BatchRecoverer
}

// heartbeatOwn sends one heartbeat of the tracked jobs straight to the
// registry, as the Runner would, and prints which ones it reported lost.
func (r *tracking) heartbeatOwn(ctx context.Context) error {
	r.mu.Lock()
	refs := slices.Clone(r.refs)
	r.mu.Unlock()
	lost, err := r.Registry.Heartbeat(ctx, refs, time.Second)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if slices.Contains(lost, ref.ID) {
			r.say("HB %s lost", ref.ID)
		} else {
			r.say("HB %s ok", ref.ID)
		}
	}
	return nil
}

// causeKind names why a job context ended: "stale" (reclaimed elsewhere,
// as a heartbeat found), "lost" (its lease ran out by the worker's clock)
// or "other".
func causeKind(err error) string {
	switch {
	case errors.Is(err, jobs.ErrStale):
		return "stale"
	case errors.Is(err, lock.ErrLost):
		return "lost"
	}
	return "other"
}

func child(mode string) error {
	store, err := storeFromEnv(os.Getenv("JOBS_NS"))
	if err != nil {
		return err
	}
	l, err := backends.FromEnv()
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) { mu.Lock(); fmt.Printf(format+"\n", args...); mu.Unlock() }
	tr := &tracking{Registry: store, say: say}
	var reg jobs.Registry = tr
	if os.Getenv("JOBS_BATCHED") != "" { // recover in batches, as the store can
		reg = batchedTracking{tr, store.(jobs.BatchRecoverer)}
	}
	opts := append([]jobs.Option{jobs.WithElection(os.Getenv("JOBS_NS"))}, fast...)
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
	var todo []jobs.Job
	if js := os.Getenv("JOBS_JOB"); js != "" {
		var j jobs.Job
		if err := json.Unmarshal([]byte(js), &j); err != nil {
			return err
		}
		todo = append(todo, j)
	} else {
		for _, id := range strings.Split(os.Getenv("JOBS_IDS"), ",") {
			todo = append(todo, jobs.Job{ID: id, Payload: []byte("work " + id)})
		}
	}
	var dones []func(error) error
	for _, j := range todo {
		jctx, done, err := r.Track(ctx, j)
		if err != nil {
			return err
		}
		go func() {
			<-jctx.Done()
			cause := context.Cause(jctx)
			say("CANCELLED %s %s %s", j.ID, causeKind(cause), strings.ReplaceAll(fmt.Sprint(cause), "\n", " "))
		}()
		dones = append(dones, done)
		say("TRACKED %s %s %d", j.ID, r.Owner(), j.Attempt)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "HB":
			if err := tr.heartbeatOwn(ctx); err != nil {
				return err
			}
		case "DONE":
			for i, done := range dones {
				if err := done(nil); err != nil {
					say("DONE %s stale", todo[i].ID)
				} else {
					say("DONE %s ok", todo[i].ID)
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
	r, err := jobs.NewRunner(reg, l, rec.requeue, append([]jobs.Option{jobs.WithElection(ns)}, fast...)...)
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

// A recovering process killed right after each step of its first
// recovery: it really dies there (its "DYING" line, then SIGKILL), no job is
// lost, and the duplicates are at most one per crash. On the bury path —
// jobs at MaxRetries, the recoverer killed after the reclaim and before
// the bury — every job ends in the dead set, none requeued.
func TestRecovererKilledBetweenSteps(t *testing.T) {
	eachStore(t, func(t *testing.T, s store, b backends.Backend) {
		for _, tc := range []struct {
			name    string
			step    jobs.Step
			attempt int // of the crashed worker's jobs
			bury    bool
		}{
			{"reclaimed", jobs.StepReclaimed, 0, false},
			{"requeued", jobs.StepRequeued, 0, false},
			{"reclaimed-before-bury", jobs.StepReclaimed, jobs.DefaultMaxRetries, true},
		} {
			for _, batched := range []bool{false, true} {
				name := tc.name
				env := append(append(s.env, b.Env...), "JOBS_CHILD=recoverer", "JOBS_KILL_AT="+string(tc.step))
				if batched {
					name += "/batched"
					env = append(env, "JOBS_BATCHED=1")
				}
				t.Run(name, func(t *testing.T) {
					ns := nsFor(t)
					reg := s.open(t, ns)
					ids := []string{"a", "b", "c"}
					for _, id := range ids {
						if _, err := reg.Track(t.Context(), jobs.Job{ID: id, Payload: []byte("work " + id), Owner: "crashed-worker", Attempt: tc.attempt}, 100*time.Millisecond); err != nil {
							t.Fatal(err)
						}
					}
					r := childproc.Start(t, append(env, "JOBS_NS="+ns)...)
					childRequeued := map[string]int{}
					var dying []string
					for line := range r.Lines { // until the child dies
						var id string
						var attempt int
						if _, err := fmt.Sscanf(line, "REQUEUED %s %d", &id, &attempt); err == nil {
							if len(dying) > 0 {
								t.Fatalf("the recoverer went on after %q: %q", dying[0], line)
							}
							childRequeued[id]++
						}
						if strings.HasPrefix(line, "DYING after ") {
							dying = append(dying, line)
						}
					}
					_ = r.Cmd.Wait() // its stdout is closed: it has exited
					if len(dying) != 1 || !strings.HasPrefix(dying[0], "DYING after "+string(tc.step)+" of ") {
						t.Fatalf("the recoverer's last words: %q, want one \"DYING after %s of <job>\"", dying, tc.step)
					}
					if ws, ok := r.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
						t.Fatalf("the recoverer ended with %v, want killed by SIGKILL at the step", r.Cmd.ProcessState)
					}
					victim := strings.TrimPrefix(dying[0], "DYING after "+string(tc.step)+" of ")
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
					if c, _ := reg.Counts(t.Context()); c.Tracked != 0 {
						t.Fatalf("entries left: %+v", c)
					}
					if tc.bury {
						for _, id := range ids {
							if n := childRequeued[id] + rec.count(id); n != 0 {
								t.Fatalf("job %s, at MaxRetries, was requeued %d times", id, n)
							}
							d, err := reg.DeadJob(t.Context(), id)
							if err != nil {
								t.Fatalf("job %s was lost (killed after %s, before the bury): %v", id, tc.step, err)
							}
							// The dead recoverer's reclaim counts: the victim was
							// reclaimed twice, the others once; in batches it
							// had reclaimed all three (one ReclaimEach) before
							// it died.
							want := tc.attempt + 1
							if id == victim || batched {
								want++
							}
							if d.Attempt != want || len(d.History) != want-tc.attempt || string(d.Payload) != "work "+id {
								t.Fatalf("dead job %+v, want attempt %d", d, want)
							}
						}
						if c, _ := reg.Counts(t.Context()); c.Dead != int64(len(ids)) {
							t.Fatalf("counts %+v, want all %d dead", c, len(ids))
						}
						t.Logf("killed after %s of %s: every job buried, none requeued", tc.step, victim)
						return
					}
					dups := 0
					for _, id := range ids {
						n := childRequeued[id] + rec.count(id)
						if n == 0 {
							t.Fatalf("job %s was lost (killed after %s)", id, tc.step)
						}
						if n > 2 {
							t.Fatalf("job %s requeued %d times after one crash", id, n)
						}
						dups += n - 1
					}
					if tc.step == jobs.StepRequeued && childRequeued[victim] != 1 {
						t.Fatalf("killed after requeueing %s, but the child requeued %v", victim, childRequeued)
					}
					t.Logf("killed after %s of %s: every job requeued, %d duplicate(s)", tc.step, victim, dups)
				})
			}
		}
	})
}

// A zombie worker (SIGSTOP past its lease, then SIGCONT): its job context
// is cancelled (stale, or lost by its own clock), a heartbeat it sends for
// the job is answered "lost", and its Done is rejected; the job was
// requeued meanwhile.
func TestZombieWorkerProcess(t *testing.T) {
	eachStore(t, func(t *testing.T, s store, b backends.Backend) {
		ns := nsFor(t)
		reg := s.open(t, ns)
		w := childproc.Start(t, append(append(s.env, b.Env...), "JOBS_CHILD=worker", "JOBS_NS="+ns, "JOBS_IDS=z")...)
		w.Expect(t, "TRACKED z", 30*time.Second)
		w.Send(t, "HB")
		if got := w.Expect(t, "HB z", 5*time.Second); got != "HB z ok" {
			t.Fatalf("the owner's own heartbeat: %q, want accepted", got)
		}
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
		if f := strings.Fields(cancelled); len(f) < 3 || (f[2] != "stale" && f[2] != "lost") {
			t.Fatalf("the zombie's job context: %q, want its cause to be ErrStale or lock.ErrLost", cancelled)
		}
		t.Logf("zombie: %s", cancelled)
		w.Send(t, "HB")
		if got := w.Expect(t, "HB z", 5*time.Second); got != "HB z lost" {
			t.Fatalf("the zombie's heartbeat: %q, want rejected (reported lost)", got)
		}
		w.Send(t, "DONE")
		if got := w.Expect(t, "DONE z", 3*time.Second); got != "DONE z stale" {
			t.Fatalf("the zombie's Done: %q, want rejected", got)
		}
	})
}

// A job that keeps crashing its worker: each time a worker process takes
// it (tracked through its Runner, heartbeating) it is SIGKILLed mid-job; the
// leader-gated recovery of Runner.Run requeues it to the next worker, and
// after MaxRetries recoveries buries it. The dead set holds it with its
// payload and one history entry per crash; retrying it requeues it afresh
// and empties the dead set.
func TestPoisonJobProcess(t *testing.T) {
	const maxRetries = 2
	eachStore(t, func(t *testing.T, s store, b backends.Backend) {
		ns := nsFor(t)
		reg := s.open(t, ns)
		requeued := make(chan jobs.Job, 10)
		dead := make(chan jobs.DeadJob, 10)
		r, err := jobs.NewRunner(reg, b.New(t), func(_ context.Context, j jobs.Job, _ time.Duration) error {
			requeued <- j
			return nil
		}, append(fast, jobs.WithElection(ns), jobs.WithMaxRetries(maxRetries),
			jobs.OnDead(func(_ context.Context, d jobs.DeadJob) { dead <- d }))...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { _ = r.Run(ctx); close(stopped) }()
		t.Cleanup(func() { cancel(); <-stopped })

		next := jobs.Job{ID: "poison", Payload: []byte("boom")} // as the queue hands it out
		var owners []string
		var onDead jobs.DeadJob
	crashes:
		for crash := 1; ; crash++ {
			if crash > maxRetries+1 {
				t.Fatalf("still requeued after %d crashes, MaxRetries %d", crash-1, maxRetries)
			}
			js, err := json.Marshal(next)
			if err != nil {
				t.Fatal(err)
			}
			w := childproc.Start(t, append(append(s.env, b.Env...), "JOBS_CHILD=worker", "JOBS_NS="+ns, "JOBS_JOB="+string(js))...)
			var id, owner string
			var attempt int
			if _, err := fmt.Sscanf(w.Expect(t, "TRACKED", 30*time.Second), "TRACKED %s %s %d", &id, &owner, &attempt); err != nil || attempt != crash-1 {
				t.Fatalf("worker %d tracked attempt %d (%v), want %d", crash, attempt, err, crash-1)
			}
			owners = append(owners, owner)
			w.Expect(t, "HEARTBEAT lost=", 10*time.Second) // the job is running and heartbeated
			w.Signal(t, syscall.SIGKILL)
			select {
			case next = <-requeued:
				if next.Attempt != crash || len(next.History) != crash || next.History[crash-1].From != owner {
					t.Fatalf("requeued after crash %d: %+v", crash, next)
				}
			case onDead = <-dead:
				if crash != maxRetries+1 {
					t.Fatalf("buried after %d crashes, want %d", crash, maxRetries+1)
				}
				break crashes
			case <-time.After(10 * time.Second):
				t.Fatalf("crash %d: the job was neither requeued nor buried within 10 s", crash)
			}
		}

		d, err := reg.DeadJob(t.Context(), "poison")
		if err != nil {
			t.Fatal(err)
		}
		if d.Attempt != maxRetries+1 || string(d.Payload) != "boom" || d.Reason == "" || d.DiedAt.IsZero() || onDead.ID != "poison" {
			t.Fatalf("dead job %+v (OnDead got %+v)", d, onDead)
		}
		if len(d.History) != len(owners) {
			t.Fatalf("history %+v, want one entry per crash of %v", d.History, owners)
		}
		for i, h := range d.History {
			if h.From != owners[i] || h.By != r.Owner() || h.Attempt != i+1 || h.At.IsZero() {
				t.Fatalf("history entry %d: %+v, want from %s by %s, attempt %d", i, h, owners[i], r.Owner(), i+1)
			}
		}
		if c, err := reg.Counts(t.Context()); err != nil || c.Tracked != 0 || c.Dead != 1 {
			t.Fatalf("counts %+v, %v; want the job dead and nothing in flight", c, err)
		}

		if err := r.RetryDead(t.Context(), "poison"); err != nil {
			t.Fatal(err)
		}
		select {
		case j := <-requeued:
			if j.ID != "poison" || string(j.Payload) != "boom" || j.Attempt != 0 || len(j.History) != 0 {
				t.Fatalf("retried job %+v, want the payload with a fresh attempt count and history", j)
			}
		default:
			t.Fatal("RetryDead did not requeue the job")
		}
		if _, err := reg.DeadJob(t.Context(), "poison"); !errors.Is(err, jobs.ErrNotFound) {
			t.Fatalf("the dead set after RetryDead: %v, want ErrNotFound", err)
		}
		if c, err := reg.Counts(t.Context()); err != nil || c.Dead != 0 {
			t.Fatalf("counts after RetryDead: %+v, %v", c, err)
		}
	})
}
