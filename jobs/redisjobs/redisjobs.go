// Package redisjobs is the Redis jobs.Registry.
//
// Layout, under a namespace ns (default "leasehold:jobs"), every key with
// the hash tag {ns} so that one registry lives in one Cluster slot:
//
//	{ns}:job:<id>    hash: payload, owner, attempt, epoch, deadline (ms), history, maxretries
//	{ns}:deadlines   sorted set of in-flight IDs by deadline: the expiry index
//	{ns}:epoch       the epoch counter
//	{ns}:dead:<id>   hash: a dead job, with died and reason
//	{ns}:deadset     sorted set of dead IDs by time of death
//	{ns}:done:<epoch>:<id>  a completion marker, expiring after jobs.DoneWindow
//	{ns}:retry:<id>  hash: attempt, history, maxretries of a requeued job
//	                 (Remove), for its next Track; expiring after jobs.RetryWindow
//
// IDs are opaque bytes (NUL and separators included): they appear only as
// the tail of a key and as index members, never inside an encoded field.
// The history field separates records with \x1e and fields with \x1f;
// the owners in it are identities (backendkit.CheckOwner: no control
// characters), checked where they enter (Track, Reclaim).
//
// Every operation is Lua scripts on the server's clock (TIME), in one
// round trip but for heartbeats of more than a chunk and listings of more
// than a page (see Bounds). Expired reads the index
// with ZRANGEBYSCORE: O(log n + k) for k expired jobs, whatever the number
// n tracked. The operator listings (InFlight, Dead) read every field of a
// job but its payload, which never leaves the server for them. The
// scripts that list jobs (Expired, InFlight, Dead) read job hashes they do
// not declare: those share the index's hash tag, so they are on the node
// that runs the script, which Redis (7.x) allows.
//
// # Bounds
//
// No script does work that grows with the number of jobs tracked, so that
// none keeps Redis from its other clients for more than about a
// millisecond (measured: bench BenchmarkJobsScale):
//
//   - Track, Done, Remove, Reclaim, Bury, Purge: one job each; DeadJob is
//     one HMGET; Counts is ZCARD and ZCOUNT, O(log n).
//   - ReclaimEach, RemoveEach (the recovery scan's, jobs.BatchRecoverer):
//     Reclaim's or Remove's script, one job each, for every ref, in one
//     pipeline. Redis reads a pipeline 16 KB at a time and runs the
//     scripts of one read back to back (about 60 reclaims) before it
//     serves another client: while a scan recovered 10,000 jobs among
//     10,000,000, another client's PING p99 was 3.4–4.5 ms (bench
//     BenchmarkJobsScale/redis/recover).
//   - Heartbeat: one script per 100 jobs (an HGET and an HSET each, one
//     ZADD for the chunk: under a millisecond at 10,000,000 tracked), two
//     in flight at once on two connections, so that Redis is never idle
//     and a command of another client waits for at most two scripts:
//     100,000 jobs are 1,000 scripts, 500 round trips of wall time, about
//     a second at 10,000,000 tracked, Redis-bound. One pipeline of every
//     script would be one round trip, but Redis reads a pipeline in large
//     blocks and runs dozens of its scripts back to back: the other
//     clients then wait for all of them.
//   - Expired, InFlight, Dead: one script per page of 500 index entries,
//     each page from the cursor the one before returned (a score, and the
//     last member read: the page goes on from that member's rank, or,
//     when it moved, from the first member of that score, listing again
//     those the registry then drops), one round trip per page: a scan of
//     100 expired jobs is one, a listing of 10,000 is twenty. Entries that
//     move between two pages (a heartbeat, a completion) may be listed
//     twice — the registry drops the second — or not at all: the next
//     scan sees them. An entry that does not change is listed.
//
// Durability is Redis's: without AOF (appendfsync everysec or always) a
// restart loses the registry, and with it the knowledge of what was in
// flight. Run the registry's Redis with persistence.
//
// # Client retries
//
// go-redis retries a command whose reply was lost (MaxRetries, 3 by
// default). The scripts are safe to retry. Done is idempotent per epoch:
// the completion leaves a marker key that expires after jobs.DoneWindow,
// and a retried Done that finds the entry gone but the marker there
// returns nil, as the first attempt did. Other outcomes may be the retry's
// (a Remove or Bury that took effect is retried and reports
// jobs.ErrStale, which the Runner ignores).
package redisjobs

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/rediscall"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

var (
	//go:embed track.lua
	trackSrc string
	//go:embed heartbeat.lua
	heartbeatSrc string
	//go:embed remove.lua
	removeSrc string
	//go:embed done.lua
	doneSrc string
	//go:embed expired.lua
	expiredSrc string
	//go:embed reclaim.lua
	reclaimSrc string
	//go:embed bury.lua
	burySrc string
	//go:embed dead.lua
	deadSrc string
	//go:embed purge.lua
	purgeSrc string
	//go:embed counts.lua
	countsSrc string

	trackScript     = redis.NewScript(trackSrc)
	heartbeatScript = redis.NewScript(heartbeatSrc)
	removeScript    = rediscall.NewScript(removeSrc)
	doneScript      = redis.NewScript(doneSrc)
	expiredScript   = redis.NewScript(expiredSrc)
	reclaimScript   = rediscall.NewScript(reclaimSrc)
	buryScript      = redis.NewScript(burySrc)
	deadScript      = redis.NewScript(deadSrc)
	purgeScript     = redis.NewScript(purgeSrc)
	countsScript    = redis.NewScript(countsSrc)
)

// Separators of the history field: records, and fields within a record.
const (
	recordSep = "\x1e"
	fieldSep  = "\x1f"
)

// Registry is a jobs.Registry and jobs.Inspector on Redis.
type Registry struct {
	c      redis.UniversalClient
	ns     string           // "{<namespace>}:"
	bounds rediscall.Bounds // calls end with their context (also without ContextTimeoutEnabled)
	acks   rediscall.Acks   // WithReplicaAcks
}

// Option configures New.
type Option func(*config) error

type config struct{ acks rediscall.Acks }

// WithReplicaAcks makes every write of the registry — a tracked job, its
// heartbeat deadline, its completion, a reclaim, a removal, a burial, a
// purge — wait until n replicas have acknowledged it (WAIT n timeout, in
// the same round trip as the script, as redislock.WithReplicaAcks does),
// so that a failover that promotes an acknowledging replica (or one at
// least as up to date) keeps it. A write fewer than n replicas
// acknowledged within timeout fails with lock.ErrUnavailable: its outcome
// is unknown, and the caller retries it (Done is idempotent per epoch, a
// retried Track replaces the entry). n is 1 to 16 and timeout 1 ms to a
// minute; the client must be a *redis.Client (a failover client from
// Sentinel is one) or a *redis.ClusterClient.
func WithReplicaAcks(n int, timeout time.Duration) Option {
	return func(c *config) error {
		a := rediscall.Acks{N: n, Timeout: timeout}
		if err := a.Check(); err != nil {
			return err
		}
		c.acks = a
		return nil
	}
}

// write runs a script that writes; under WithReplicaAcks, a write not
// acknowledged in time is the command's error.
func (r *Registry) write(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd, acked := r.bounds.Write(ctx, r.c, r.acks, script, keys, args...)
	if acked != nil && cmd.Err() == nil {
		cmd.SetErr(acked)
	}
	return cmd
}

var (
	_ jobs.Registry       = (*Registry)(nil)
	_ jobs.Inspector      = (*Registry)(nil)
	_ jobs.BurialPurger   = (*Registry)(nil)
	_ jobs.BatchRecoverer = (*Registry)(nil)
)

// New returns the registry called namespace ("" for "leasehold:jobs") on c.
func New(c redis.UniversalClient, namespace string, opts ...Option) (*Registry, error) {
	if c == nil {
		return nil, backendkit.Invalid("redisjobs", "nil client")
	}
	var cfg config
	if err := backendkit.Apply("redisjobs", &cfg, opts); err != nil {
		return nil, err
	}
	if err := cfg.acks.CheckClient(c); err != nil {
		return nil, backendkit.Invalid("redisjobs", "%w", err)
	}
	if namespace == "" {
		namespace = "leasehold:jobs"
	}
	if strings.ContainsAny(namespace, "{}") {
		return nil, backendkit.Invalid("redisjobs", "namespace %q contains a brace", namespace)
	}
	return &Registry{c: c, ns: "{" + namespace + "}:", bounds: rediscall.For(c), acks: cfg.acks}, nil
}

func (r *Registry) jobKey(id string) string  { return r.ns + "job:" + id }
func (r *Registry) deadKey(id string) string { return r.ns + "dead:" + id }
func (r *Registry) deadlines() string        { return r.ns + "deadlines" }
func (r *Registry) epochs() string           { return r.ns + "epoch" }
func (r *Registry) deadset() string          { return r.ns + "deadset" }

// retryKey is the retry record of a requeued job (Remove), which the next
// Track of its ID takes over.
func (r *Registry) retryKey(id string) string { return r.ns + "retry:" + id }

// doneKey is the completion marker of one epoch of a job: the epoch's
// digits end at the first colon, so that no two (epoch, id) pairs share a
// key.
func (r *Registry) doneKey(ref jobs.Ref) string {
	return r.ns + "done:" + strconv.FormatUint(ref.Epoch, 10) + ":" + ref.ID
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

func unavailable(op string, err error) error { return backendkit.Unavailable("redisjobs: "+op, err) }

func stale(ref jobs.Ref) error {
	return fmt.Errorf("%w: %s epoch %d", jobs.ErrStale, ref.ID, ref.Epoch)
}

// Track implements jobs.Registry: one script (one round trip), deadline on
// server time (TIME); the epoch comes from the {ns}:epoch counter, and an
// entry of the same ID is replaced (it goes stale). The script takes over
// the count of that entry or of the ID's retry record (and deletes the
// record), as jobs.Registry says.
func (r *Registry) Track(ctx context.Context, job jobs.Job, lease time.Duration) (jobs.Job, error) {
	if err := jobs.CheckTrack(ctx, job, lease); err != nil {
		return jobs.Job{}, err
	}
	res, err := r.write(ctx, trackScript, []string{r.jobKey(job.ID), r.deadlines(), r.epochs(), r.retryKey(job.ID)},
		job.ID, job.Payload, job.Owner, job.Attempt, ms(lease), encodeHistory(job.History), job.MaxRetries).StringSlice()
	if err != nil || len(res) != 5 {
		return jobs.Job{}, unavailable("track", errors.Join(err, fmt.Errorf("reply of %d fields", len(res))))
	}
	epoch, _ := strconv.ParseUint(res[0], 10, 64)
	deadline, _ := strconv.ParseInt(res[1], 10, 64)
	job.Epoch, job.Deadline = epoch, time.UnixMilli(deadline)
	job.Attempt, _ = strconv.Atoi(res[2])
	job.MaxRetries, _ = strconv.Atoi(res[3])
	job.History = decodeHistory(res[4])
	return job, nil
}

// heartbeatChunk is the most jobs one heartbeat script extends: under a
// millisecond of Redis time (an HGET and an HSET per job, one ZADD) at
// 10,000,000 jobs tracked. heartbeatWindow is how many of a heartbeat's
// scripts are in flight at once, each on a connection of its own: Redis
// runs one while the next waits, and a command of another client waits
// for at most those two. (One pipeline of every chunk let Redis read
// dozens of them at once and run them back to back: measured at
// 10,000,000 jobs, a PING behind them waited 4 ms at the median and 8 ms
// at p99; chunks of 200 two at a time, 3 and 8 ms; of 100, 1.8 and 4.7 ms.)
// Variables for the tests.
var (
	heartbeatChunk  = 100
	heartbeatWindow = 2
)

// Heartbeat implements jobs.Registry: one script per heartbeatChunk (100)
// jobs, two in flight at once (heartbeatWindow): about one round trip of
// wall time per two chunks, and Redis serves its other clients between two
// scripts; under WithReplicaAcks each script is followed by its WAIT.
// Deadlines on server time; it returns the IDs whose epoch no longer
// matches or whose entry is gone. When some chunks fail, the jobs of the
// others are extended and the error is a *jobs.HeartbeatError naming the
// failed chunks' IDs; when all fail, the error is theirs.
func (r *Registry) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	if err := jobs.CheckHeartbeat(ctx, refs, lease); err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, nil
	}
	chunks := (len(refs) + heartbeatChunk - 1) / heartbeatChunk
	lost := make([][]string, chunks)
	errs := make([]error, chunks)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(heartbeatWindow, chunks) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < chunks; i = int(next.Add(1) - 1) {
				lost[i], errs[i] = r.heartbeatChunk(ctx, refs[i*heartbeatChunk:min((i+1)*heartbeatChunk, len(refs))], ms(lease))
			}
		})
	}
	wg.Wait()
	var all, unknown []string
	var first error
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
			for _, ref := range refs[i*heartbeatChunk : min((i+1)*heartbeatChunk, len(refs))] {
				unknown = append(unknown, ref.ID)
			}
			continue
		}
		all = append(all, lost[i]...)
	}
	switch {
	case failed == chunks:
		return nil, unavailable("heartbeat", first)
	case failed > 0:
		return all, &jobs.HeartbeatError{Unknown: unknown, Err: unavailable("heartbeat", first)}
	}
	return all, nil
}

// heartbeatChunk runs the heartbeat script for one chunk of refs.
func (r *Registry) heartbeatChunk(ctx context.Context, refs []jobs.Ref, lease int64) ([]string, error) {
	keys := make([]string, 0, len(refs)+1)
	args := make([]any, 0, 2*len(refs)+1)
	keys = append(keys, r.deadlines())
	args = append(args, lease)
	for _, ref := range refs {
		keys = append(keys, r.jobKey(ref.ID))
		args = append(args, ref.ID, strconv.FormatUint(ref.Epoch, 10))
	}
	return r.write(ctx, heartbeatScript, keys, args...).StringSlice()
}

func (r *Registry) remove(ctx context.Context, ref jobs.Ref, op string, script *redis.Script, keys []string, args ...any) error {
	if err := jobs.CheckID(ctx, ref.ID); err != nil {
		return err
	}
	keys = append([]string{r.jobKey(ref.ID), r.deadlines()}, keys...)
	args = append([]any{ref.ID, strconv.FormatUint(ref.Epoch, 10)}, args...)
	n, err := r.write(ctx, script, keys, args...).Int64()
	switch {
	case err != nil:
		return unavailable(op, err)
	case n == 0:
		return stale(ref)
	}
	return nil
}

// Done implements jobs.Registry: one script removes the entry and its index
// member if the epoch matches and sets the epoch's completion marker (a
// key that expires after jobs.DoneWindow: Redis drops it, nothing is
// scanned) and deletes the ID's retry record; a Done that finds the marker
// returns nil (a retry whose first attempt took effect, see Client retries
// in the package doc); else jobs.ErrStale.
func (r *Registry) Done(ctx context.Context, ref jobs.Ref) error {
	return r.remove(ctx, ref, "done", doneScript, []string{r.doneKey(ref), r.retryKey(ref.ID)}, jobs.DoneWindow.Milliseconds())
}

// Remove implements jobs.Registry: one script removes the entry of ref's
// epoch, for the recoverer after a requeue, and leaves its retry record (a
// key that expires after jobs.RetryWindow: Redis drops it, nothing is
// scanned); else jobs.ErrStale.
func (r *Registry) Remove(ctx context.Context, ref jobs.Ref) error {
	return r.RemoveEach(ctx, []jobs.Ref{ref})[0]
}

// RemoveEach implements jobs.BatchRecoverer: Remove's script for each
// ref, all in one pipeline (one round trip of wall time; see Bounds in the
// package doc).
func (r *Registry) RemoveEach(ctx context.Context, refs []jobs.Ref) []error {
	out := make([]error, len(refs))
	cmds := r.pipeline(ctx, refs, out, func(ref jobs.Ref) error { return jobs.CheckID(ctx, ref.ID) }, removeScript,
		func(ref jobs.Ref) ([]string, []any) {
			return []string{r.jobKey(ref.ID), r.deadlines(), r.retryKey(ref.ID)},
				[]any{ref.ID, strconv.FormatUint(ref.Epoch, 10), jobs.RetryWindow.Milliseconds()}
		})
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		n, err := cmd.Int64()
		switch {
		case err != nil:
			out[i] = unavailable("remove", err)
		case n == 0:
			out[i] = stale(refs[i])
		}
	}
	return out
}

// pipeline runs script for each ref that check accepts, its keys and
// arguments made by call, all in one pipeline (rediscall.Bounds.Pipeline),
// and returns each ref's reply: nil for a ref that check refused, whose
// error it puts in out. Under WithReplicaAcks, a write not acknowledged in
// time is its reply's error, as write's.
func (r *Registry) pipeline(ctx context.Context, refs []jobs.Ref, out []error, check func(jobs.Ref) error, script *rediscall.Script, call func(jobs.Ref) ([]string, []any)) []*redis.Cmd {
	calls := make([]rediscall.Call, 0, len(refs))
	at := make([]int, 0, len(refs))
	for i, ref := range refs {
		if out[i] = check(ref); out[i] != nil {
			continue
		}
		keys, args := call(ref)
		calls = append(calls, rediscall.Call{Script: script, Args: script.Call(keys, args...)})
		at = append(at, i)
	}
	cmds := make([]*redis.Cmd, len(refs))
	if len(calls) == 0 {
		return cmds // every ref refused (a nil or ended ctx among the reasons)
	}
	r.bounds.Pipeline(ctx, r.c, r.acks, calls, true)
	for k, i := range at {
		cmd := calls[k].Cmd
		if calls[k].Acked != nil && cmd.Err() == nil {
			cmd.SetErr(calls[k].Acked)
		}
		cmds[i] = cmd
	}
	return cmds
}

// Expired implements jobs.Registry: one script per page of listChunk
// (500) jobs, ZRANGEBYSCORE over the deadline index up to server time
// from a cursor: O(log n + k) for k expired of n tracked; earliest
// deadline first, up to limit (0: all), payloads included. 100 expired
// jobs are one round trip.
func (r *Registry) Expired(ctx context.Context, limit int) ([]jobs.Job, error) {
	return r.list(ctx, limit, false)
}

// InFlight implements jobs.Inspector: pages of listChunk (500) jobs, one
// script each, over the whole deadline index, earliest deadline first, up
// to limit (0: all). The script reads no payload field: the payloads never
// leave the server.
func (r *Registry) InFlight(ctx context.Context, limit int) ([]jobs.Job, error) {
	return r.list(ctx, limit, true)
}

// listChunk is the most jobs one listing script reads (a page of Expired,
// InFlight or Dead): about 1.5 ms of Redis time for a page of Expired,
// whose jobs come whole (one of 1,000 took about 3 ms, measured with
// bench BenchmarkJobsScale/redis/recover's SLOWLOG).
var listChunk = 500

// pages reads up to limit (0 or less: all) entries of an index through
// page, one script per listChunk entries, each from the cursor the one
// before returned (a score and the last member it read), and decodes
// their flat fields, stride per entry, each ID once. A page that read
// fewer members than it asked for is the last. Entries that change
// between two pages (a heartbeat, a completion) may be listed twice (the
// second is dropped) or not at all, as by any listing that is not one
// snapshot: the next scan sees them; an entry that did not change is
// listed (a page goes on from the last member's rank, or lists that
// score's members again when it moved: see expired.lua).
func pages[T any](limit int, cursor string, stride int, page func(n int, cursor, last string) ([]string, error), decode func(id string, f []string) T) ([]T, error) {
	var out []T
	seen := map[string]bool{}
	last := ""
	for limit <= 0 || len(out) < limit {
		n := listChunk
		if limit > 0 {
			n = min(n, limit-len(out))
		}
		flat, err := page(n, cursor, last)
		if err != nil {
			return nil, err
		}
		if len(flat) < 3 {
			return nil, fmt.Errorf("page of %d fields", len(flat))
		}
		cursor, last = flat[0], flat[1]
		read, _ := strconv.Atoi(flat[2])
		for i := 3; i+stride <= len(flat); i += stride {
			if id := flat[i]; !seen[id] {
				seen[id] = true
				out = append(out, decode(id, flat[i+1:i+stride]))
			}
		}
		if read < n {
			break
		}
	}
	return out, nil
}

// list reads the expired jobs whole, or (inFlight) every job without its
// payload, in pages.
func (r *Registry) list(ctx context.Context, limit int, inFlight bool) ([]jobs.Job, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	op, all, stride, decode := "expired", "0", 8, decodeJob // id and the fields of decode
	if inFlight {
		op, all, stride, decode = "in flight", "1", 7, decodeListed
	}
	out, err := pages(limit, "-inf", stride, func(n int, cursor, last string) ([]string, error) {
		return r.bounds.Run(ctx, r.c, expiredScript, []string{r.deadlines()}, n, r.ns+"job:", all, cursor, last).StringSlice()
	}, decode)
	if err != nil {
		return nil, unavailable(op, err)
	}
	return out, nil
}

// decodeJob reads payload, owner, attempt, epoch, deadline, history, max
// retries.
func decodeJob(id string, f []string) jobs.Job {
	j := decodeListed(id, f[1:])
	j.Payload = []byte(f[0])
	return j
}

// decodeListed reads owner, attempt, epoch, deadline, history, max
// retries: a job as the operator listings give it, without its payload. A
// missing max retries (a job tracked by an earlier version) reads as 0.
func decodeListed(id string, f []string) jobs.Job {
	attempt, _ := strconv.Atoi(f[1])
	epoch, _ := strconv.ParseUint(f[2], 10, 64)
	deadline, _ := strconv.ParseInt(f[3], 10, 64)
	maxRetries, _ := strconv.Atoi(f[5])
	return jobs.Job{ID: id, Owner: f[0], Attempt: attempt, MaxRetries: maxRetries, Epoch: epoch,
		Deadline: time.UnixMilli(deadline), History: decodeHistory(f[4])}
}

// Reclaim implements jobs.Registry: one script checks, on server time, that
// the entry is of ref's epoch and expired, then gives it a new epoch,
// Attempt+1, owner by, a deadline and a history record; else jobs.ErrStale.
func (r *Registry) Reclaim(ctx context.Context, ref jobs.Ref, by string, lease time.Duration) (jobs.Job, error) {
	got := r.ReclaimEach(ctx, []jobs.Ref{ref}, by, lease)[0]
	return got.Job, got.Err
}

// ReclaimEach implements jobs.BatchRecoverer: Reclaim's script for each
// ref, all in one pipeline (one round trip of wall time; see Bounds in the
// package doc).
func (r *Registry) ReclaimEach(ctx context.Context, refs []jobs.Ref, by string, lease time.Duration) []jobs.Reclaimed {
	errs := make([]error, len(refs))
	cmds := r.pipeline(ctx, refs, errs, func(ref jobs.Ref) error { return jobs.CheckReclaim(ctx, ref, by, lease) }, reclaimScript,
		func(ref jobs.Ref) ([]string, []any) {
			return []string{r.jobKey(ref.ID), r.deadlines(), r.epochs()},
				[]any{ref.ID, strconv.FormatUint(ref.Epoch, 10), by, ms(lease), recordSep, fieldSep}
		})
	out := make([]jobs.Reclaimed, len(refs))
	for i, cmd := range cmds {
		if cmd == nil {
			out[i].Err = errs[i]
			continue
		}
		f, err := cmd.StringSlice()
		switch {
		case err != nil:
			out[i].Err = unavailable("reclaim", err)
		case len(f) != 7:
			out[i].Err = stale(refs[i])
		default:
			out[i].Job = decodeJob(refs[i].ID, f)
		}
	}
	return out
}

// Bury implements jobs.Registry: one script moves the entry of ref's epoch
// to the dead set (hash and index, time of death on server time) and
// deletes the ID's retry record, else jobs.ErrStale.
func (r *Registry) Bury(ctx context.Context, ref jobs.Ref, reason string) error {
	if err := jobs.CheckBury(ctx, ref, reason); err != nil {
		return err
	}
	n, err := r.write(ctx, buryScript, []string{r.jobKey(ref.ID), r.deadlines(), r.deadKey(ref.ID), r.deadset(), r.retryKey(ref.ID)},
		ref.ID, strconv.FormatUint(ref.Epoch, 10), reason).Int64()
	switch {
	case err != nil:
		return unavailable("bury", err)
	case n == 0:
		return stale(ref)
	}
	return nil
}

// Dead implements jobs.Inspector: one script per page of listChunk
// (500) dead jobs reads the dead-set index, the most recent death first,
// up to limit (0: all). The script reads no payload field: the payloads
// never leave the server (DeadJob reads one).
func (r *Registry) Dead(ctx context.Context, limit int) ([]jobs.DeadJob, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	const stride = 9 // id, the fields of decodeListed, died, reason
	out, err := pages(limit, "+inf", stride, func(n int, cursor, last string) ([]string, error) {
		return r.bounds.Run(ctx, r.c, deadScript, []string{r.deadset()}, n, r.ns+"dead:", cursor, last).StringSlice()
	}, func(id string, f []string) jobs.DeadJob {
		died, _ := strconv.ParseInt(f[6], 10, 64)
		return jobs.DeadJob{Job: decodeListed(id, f[:6]), DiedAt: time.UnixMilli(died), Reason: f[7]}
	})
	if err != nil {
		return nil, unavailable("dead", err)
	}
	return out, nil
}

// DeadJob implements jobs.Registry: one HMGET of the dead job's hash,
// within ctx as every call is, or jobs.ErrNotFound.
func (r *Registry) DeadJob(ctx context.Context, id string) (jobs.DeadJob, error) {
	if err := jobs.CheckID(ctx, id); err != nil {
		return jobs.DeadJob{}, err
	}
	var f []any // written by the call; read only after it returned
	err := r.bounds.Within(ctx, func() (err error) {
		f, err = r.c.HMGet(ctx, r.deadKey(id), "payload", "owner", "attempt", "epoch", "deadline", "history", "maxretries", "died", "reason").Result()
		return err
	})
	if err != nil {
		return jobs.DeadJob{}, unavailable("dead job", err)
	}
	if f[3] == nil {
		return jobs.DeadJob{}, fmt.Errorf("%w: dead job %q", jobs.ErrNotFound, id)
	}
	s := make([]string, len(f))
	for i, v := range f {
		s[i], _ = v.(string)
	}
	died, _ := strconv.ParseInt(s[7], 10, 64)
	return jobs.DeadJob{Job: decodeJob(id, s[:7]), DiedAt: time.UnixMilli(died), Reason: s[8]}, nil
}

// Purge implements jobs.Registry: one script deletes the dead job, its
// index member and the ID's retry record, or returns jobs.ErrNotFound.
func (r *Registry) Purge(ctx context.Context, id string) error {
	return r.purge(ctx, id, "")
}

// PurgeBurial implements jobs.BurialPurger: Purge of the dead job ref.ID
// when it was buried at epoch ref.Epoch (the same script checks the dead
// job's epoch), else jobs.ErrNotFound.
func (r *Registry) PurgeBurial(ctx context.Context, ref jobs.Ref) error {
	return r.purge(ctx, ref.ID, strconv.FormatUint(ref.Epoch, 10))
}

// purge deletes the dead job id, buried at epoch (a decimal) unless
// epoch is "".
func (r *Registry) purge(ctx context.Context, id, epoch string) error {
	if err := jobs.CheckID(ctx, id); err != nil {
		return err
	}
	n, err := r.write(ctx, purgeScript, []string{r.deadKey(id), r.deadset(), r.retryKey(id)}, id, epoch).Int64()
	switch {
	case err != nil:
		return unavailable("purge", err)
	case n == 0:
		return fmt.Errorf("%w: dead job %q", jobs.ErrNotFound, id)
	}
	return nil
}

// Counts implements jobs.Inspector: one script, ZCARD and ZCOUNT of the
// indexes (expired up to server time): O(log n), never a walk of the jobs.
func (r *Registry) Counts(ctx context.Context) (jobs.Counts, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return jobs.Counts{}, err
	}
	n, err := r.bounds.Run(ctx, r.c, countsScript, []string{r.deadlines(), r.deadset()}).Int64Slice()
	if err != nil || len(n) != 3 {
		return jobs.Counts{}, unavailable("counts", errors.Join(err, fmt.Errorf("reply %v", n)))
	}
	return jobs.Counts{Tracked: n[0], Expired: n[1], Dead: n[2]}, nil
}

func encodeHistory(h []jobs.Recovery) string {
	recs := make([]string, len(h))
	for i, r := range h {
		recs[i] = strings.Join([]string{strconv.FormatInt(r.At.UnixMilli(), 10), r.From, r.By, strconv.Itoa(r.Attempt)}, fieldSep)
	}
	return strings.Join(recs, recordSep)
}

func decodeHistory(s string) []jobs.Recovery {
	if s == "" {
		return nil
	}
	var out []jobs.Recovery
	for rec := range strings.SplitSeq(s, recordSep) {
		// A record that does not parse (written by something else) is
		// skipped, never shown with made-up fields.
		f := strings.Split(rec, fieldSep)
		if len(f) != 4 {
			continue
		}
		at, err1 := strconv.ParseInt(f[0], 10, 64)
		attempt, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, jobs.Recovery{At: time.UnixMilli(at), From: f[1], By: f[2], Attempt: attempt})
	}
	return out
}
