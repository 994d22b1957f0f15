// Package memjobs is the in-process jobs.Registry: a map of entries and a
// min-heap by deadline behind a mutex. Expired walks only the part of the
// heap whose deadline has passed, so its cost grows with the expired count.
// It is exact under testing/synctest, and, being in-process, survives no
// crash: use it for tests, simulations and single-process programs.
package memjobs

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock/backendkit"
)

// Registry is an in-process jobs.Registry and jobs.Inspector. The zero
// value is not usable; call New.
type Registry struct {
	mu    sync.Mutex
	byID  map[string]*entry
	heap  deadlineHeap
	dead  map[string]jobs.DeadJob
	epoch uint64

	// Completions of the last jobs.DoneWindow, for Done's idempotence.
	done *window[jobs.Ref, struct{}]
	// Retry records of the last jobs.RetryWindow (Remove), by ID, for the
	// next Track of the ID.
	retry *window[string, retryRecord]
}

// retryRecord is what Remove keeps of a requeued job for its next Track.
type retryRecord struct {
	attempt, maxRetries int
	history             []jobs.Recovery
}

type entry struct {
	job   jobs.Job
	index int // in the heap
}

var (
	_ jobs.Registry       = (*Registry)(nil)
	_ jobs.Inspector      = (*Registry)(nil)
	_ jobs.BurialPurger   = (*Registry)(nil)
	_ jobs.BatchRecoverer = (*Registry)(nil)
)

// New returns an empty registry.
func New() *Registry {
	return &Registry{byID: map[string]*entry{}, dead: map[string]jobs.DeadJob{},
		done: newWindow[jobs.Ref, struct{}](jobs.DoneWindow), retry: newWindow[string, retryRecord](jobs.RetryWindow)}
}

// Track implements jobs.Registry: under the mutex, the job gets a fresh
// epoch and a deadline lease from now on this process's clock, replacing an
// entry of the same ID (which goes stale), and takes over the count of
// that entry or of the ID's retry record (as jobs.Registry says). The
// payload is copied.
func (r *Registry) Track(ctx context.Context, job jobs.Job, lease time.Duration) (jobs.Job, error) {
	if err := jobs.CheckTrack(ctx, job, lease); err != nil {
		return jobs.Job{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.retry.forget(now)
	e, inFlight := r.byID[job.ID]
	prior, known := r.retry.take(job.ID, now)
	if inFlight {
		prior, known = retryRecord{e.job.Attempt, e.job.MaxRetries, e.job.History}, true
	}
	if known {
		job = takeOver(job, prior)
	}
	r.epoch++
	job.Epoch = r.epoch
	job.Deadline = now.Add(lease)
	job.Payload = append([]byte(nil), job.Payload...)
	job.History = slices.Clone(job.History)
	if inFlight {
		e.job = job
		heap.Fix(&r.heap, e.index)
	} else {
		e := &entry{job: job}
		r.byID[job.ID] = e
		heap.Push(&r.heap, e)
	}
	return whole(job), nil
}

// takeOver gives job the count of prior, a retry record or the entry it
// replaces: its Attempt and History unless job's Attempt is higher, and its
// MaxRetries unless job has its own.
func takeOver(job jobs.Job, prior retryRecord) jobs.Job {
	if prior.attempt >= job.Attempt {
		job.Attempt, job.History = prior.attempt, prior.history
	}
	if job.MaxRetries == 0 {
		job.MaxRetries = prior.maxRetries
	}
	return job
}

func (r *Registry) current(ref jobs.Ref) (*entry, bool) {
	e, ok := r.byID[ref.ID]
	return e, ok && e.job.Epoch == ref.Epoch
}

// Heartbeat implements jobs.Registry: under one lock, every listed job whose
// epoch matches gets a deadline lease from now; it returns the IDs of the
// others (gone or of another epoch).
func (r *Registry) Heartbeat(ctx context.Context, refs []jobs.Ref, lease time.Duration) ([]string, error) {
	if err := jobs.CheckHeartbeat(ctx, refs, lease); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	deadline := time.Now().Add(lease)
	var lost []string
	for _, ref := range refs {
		e, ok := r.current(ref)
		if !ok {
			lost = append(lost, ref.ID)
			continue
		}
		e.job.Deadline = deadline
		heap.Fix(&r.heap, e.index)
	}
	return lost, nil
}

func (r *Registry) remove(ctx context.Context, ref jobs.Ref) (*entry, error) {
	if err := jobs.CheckID(ctx, ref.ID); err != nil {
		return nil, err
	}
	e, ok := r.current(ref)
	if !ok {
		return nil, fmt.Errorf("%w: %s epoch %d", jobs.ErrStale, ref.ID, ref.Epoch)
	}
	heap.Remove(&r.heap, e.index)
	delete(r.byID, ref.ID)
	return e, nil
}

// Done implements jobs.Registry: it removes the entry if its epoch matches
// ref's and remembers the completion for jobs.DoneWindow (a map and a
// queue by time, trimmed by every Done), so that a retried Done of it
// returns nil; any other epoch is jobs.ErrStale. A completion drops the
// ID's retry record, if any.
func (r *Registry) Done(ctx context.Context, ref jobs.Ref) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := jobs.CheckID(ctx, ref.ID); err != nil {
		return err
	}
	now := time.Now()
	r.done.forget(now)
	if _, ok := r.done.get(ref, now); ok {
		return nil
	}
	if _, err := r.remove(ctx, ref); err != nil {
		return err
	}
	r.done.put(ref, struct{}{}, now)
	r.retry.remove(ref.ID) // the count ends with the job
	return nil
}

// Remove implements jobs.Registry: it removes the entry if its epoch
// matches (the recoverer, after a requeue) and keeps its retry record for
// jobs.RetryWindow (a map and a queue by time, trimmed by every Remove and
// Track), else returns jobs.ErrStale.
func (r *Registry) Remove(ctx context.Context, ref jobs.Ref) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.remove(ctx, ref)
	if err != nil {
		return err
	}
	now := time.Now()
	r.retry.forget(now)
	r.retry.put(ref.ID, retryRecord{e.job.Attempt, e.job.MaxRetries, e.job.History}, now)
	return nil
}

// Expired implements jobs.Registry: it walks only the due part of the
// deadline heap, and no more of it than limit (0: all) entries: O(k log k)
// for the k jobs it returns, earliest deadline first, whatever the number
// expired or tracked.
func (r *Registry) Expired(ctx context.Context, limit int) ([]jobs.Job, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	out := r.first(limit, func(deadline time.Time) bool { return !deadline.After(now) })
	for i := range out {
		out[i] = whole(out[i])
	}
	return out, nil
}

// first lists up to limit (0: all) entries whose deadline is in (a prefix
// of the deadline order), earliest first, sharing their slices (the caller
// copies them): a best-first walk of the deadline
// heap from its root, whose frontier holds the children of the entries
// taken. It visits O(k) entries for k returned, whatever the number
// tracked.
func (r *Registry) first(limit int, in func(deadline time.Time) bool) []jobs.Job {
	var out []jobs.Job
	f := frontier{h: r.heap, in: in}
	f.push(0)
	for len(f.idx) > 0 && (limit <= 0 || len(out) < limit) {
		i := heap.Pop(&f).(int)
		out = append(out, r.heap[i].job)
		f.push(2*i + 1)
		f.push(2*i + 2)
	}
	return out
}

// frontier is a min-heap of indices into a deadlineHeap.
type frontier struct {
	h   deadlineHeap
	in  func(deadline time.Time) bool
	idx []int
}

// push adds entry i if it exists and its deadline is in.
func (f *frontier) push(i int) {
	if i < len(f.h) && f.in(f.h[i].job.Deadline) {
		heap.Push(f, i)
	}
}

func (f *frontier) Len() int           { return len(f.idx) }
func (f *frontier) Less(a, b int) bool { return f.h.Less(f.idx[a], f.idx[b]) }
func (f *frontier) Swap(a, b int)      { f.idx[a], f.idx[b] = f.idx[b], f.idx[a] }
func (f *frontier) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *frontier) Pop() any {
	n := len(f.idx) - 1
	x := f.idx[n]
	f.idx = f.idx[:n]
	return x
}

// Reclaim implements jobs.Registry: if the entry is still of ref's epoch and
// its deadline has passed, it gets a new epoch, Attempt+1, owner by, a
// deadline lease from now and a history entry; else jobs.ErrStale.
func (r *Registry) Reclaim(ctx context.Context, ref jobs.Ref, by string, lease time.Duration) (jobs.Job, error) {
	if err := jobs.CheckReclaim(ctx, ref, by, lease); err != nil {
		return jobs.Job{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	e, ok := r.current(ref)
	if !ok || e.job.Deadline.After(now) {
		return jobs.Job{}, fmt.Errorf("%w: %s epoch %d is no longer expired", jobs.ErrStale, ref.ID, ref.Epoch)
	}
	r.epoch++
	j := &e.job
	j.Attempt++
	j.History = append(append([]jobs.Recovery(nil), j.History...), jobs.Recovery{At: now, From: j.Owner, By: by, Attempt: j.Attempt})
	j.Owner, j.Epoch, j.Deadline = by, r.epoch, now.Add(lease)
	heap.Fix(&r.heap, e.index)
	return whole(*j), nil
}

// ReclaimEach implements jobs.BatchRecoverer: Reclaim of each ref in turn.
func (r *Registry) ReclaimEach(ctx context.Context, refs []jobs.Ref, by string, lease time.Duration) []jobs.Reclaimed {
	out := make([]jobs.Reclaimed, len(refs))
	for i, ref := range refs {
		out[i].Job, out[i].Err = r.Reclaim(ctx, ref, by, lease)
	}
	return out
}

// RemoveEach implements jobs.BatchRecoverer: Remove of each ref in turn.
func (r *Registry) RemoveEach(ctx context.Context, refs []jobs.Ref) []error {
	out := make([]error, len(refs))
	for i, ref := range refs {
		out[i] = r.Remove(ctx, ref)
	}
	return out
}

// Bury implements jobs.Registry: it moves the entry of ref's epoch to the
// dead set (replacing a dead job of the same ID), with reason and the time
// of death, and drops the ID's retry record, else returns jobs.ErrStale.
func (r *Registry) Bury(ctx context.Context, ref jobs.Ref, reason string) error {
	if err := jobs.CheckBury(ctx, ref, reason); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.remove(ctx, ref)
	if err != nil {
		return err
	}
	r.dead[ref.ID] = jobs.DeadJob{Job: e.job, DiedAt: time.Now(), Reason: reason}
	r.retry.remove(ref.ID) // the dead job has the count
	return nil
}

// Dead implements jobs.Inspector: up to limit (0: all) dead jobs, the most
// recent death first (ties by ID), without their payloads. It sorts the
// whole dead set.
func (r *Registry) Dead(ctx context.Context, limit int) ([]jobs.DeadJob, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]jobs.DeadJob, 0, len(r.dead))
	for _, d := range r.dead {
		d.Job = listed(d.Job)
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].DiedAt.Equal(out[j].DiedAt) {
			return out[i].ID < out[j].ID
		}
		return out[i].DiedAt.After(out[j].DiedAt)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// DeadJob implements jobs.Registry: the dead job id, or jobs.ErrNotFound.
func (r *Registry) DeadJob(ctx context.Context, id string) (jobs.DeadJob, error) {
	if err := jobs.CheckID(ctx, id); err != nil {
		return jobs.DeadJob{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.dead[id]
	if !ok {
		return jobs.DeadJob{}, fmt.Errorf("%w: dead job %q", jobs.ErrNotFound, id)
	}
	d.Job = whole(d.Job)
	return d, nil
}

// Purge implements jobs.Registry: it deletes the dead job id and the retry
// record of id, or returns jobs.ErrNotFound.
func (r *Registry) Purge(ctx context.Context, id string) error {
	return r.purge(ctx, jobs.Ref{ID: id}, false)
}

// PurgeBurial implements jobs.BurialPurger: Purge of the dead job ref.ID
// when it was buried at epoch ref.Epoch, else jobs.ErrNotFound.
func (r *Registry) PurgeBurial(ctx context.Context, ref jobs.Ref) error {
	return r.purge(ctx, ref, true)
}

// purge deletes the dead job ref.ID, and the retry record of its ID;
// when exact, only if it was buried at epoch ref.Epoch, and the retry
// record stays (see jobs.BurialPurger).
func (r *Registry) purge(ctx context.Context, ref jobs.Ref, exact bool) error {
	if err := jobs.CheckID(ctx, ref.ID); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.dead[ref.ID]; !ok || exact && d.Epoch != ref.Epoch {
		return fmt.Errorf("%w: dead job %q", jobs.ErrNotFound, ref.ID)
	}
	delete(r.dead, ref.ID)
	if !exact {
		r.retry.remove(ref.ID)
	}
	return nil
}

// Counts implements jobs.Inspector: tracked and dead are map sizes; expired
// walks the due part of the deadline heap.
func (r *Registry) Counts(ctx context.Context) (jobs.Counts, error) {
	expired, err := r.Expired(ctx, 0)
	if err != nil {
		return jobs.Counts{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return jobs.Counts{Tracked: int64(len(r.byID)), Expired: int64(len(expired)), Dead: int64(len(r.dead))}, nil
}

// InFlight implements jobs.Inspector: up to limit (0: all) tracked jobs,
// earliest deadline first, without their payloads: a walk of the deadline
// heap, O(k log k) for the k it returns.
func (r *Registry) InFlight(ctx context.Context, limit int) ([]jobs.Job, error) {
	if err := backendkit.CheckContext(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.first(limit, func(time.Time) bool { return true })
	for i := range out {
		out[i] = listed(out[i])
	}
	return out, nil
}

// listed is j as an operator listing shows it: without its payload, and
// with a history of its own.
func listed(j jobs.Job) jobs.Job {
	j.Payload = nil
	j.History = slices.Clone(j.History)
	return j
}

// whole is j with a payload and a history of its own: what the registry
// returns is the caller's, to write into (registrytest's
// ResultsAreTheCallers), as a server's registry decodes a copy.
func whole(j jobs.Job) jobs.Job {
	j.Payload = bytes.Clone(j.Payload)
	j.History = slices.Clone(j.History)
	return j
}

// deadlineHeap orders entries by deadline.
type deadlineHeap []*entry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].job.Deadline.Before(h[j].job.Deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *deadlineHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// window is a map whose entries are forgotten a time d after they were
// put: the map answers, a queue by time (oldest first, from head) drops
// them, amortised O(1) per put.
type window[K comparable, V any] struct {
	d    time.Duration
	m    map[K]stamped[V]
	q    []stamped[K]
	head int
}

type stamped[T any] struct {
	v  T
	at time.Time
}

func newWindow[K comparable, V any](d time.Duration) *window[K, V] {
	return &window[K, V]{d: d, m: map[K]stamped[V]{}}
}

func (w *window[K, V]) put(k K, v V, now time.Time) {
	w.m[k] = stamped[V]{v, now}
	w.q = append(w.q, stamped[K]{k, now})
}

// get returns k's value if it was put at most d before now.
func (w *window[K, V]) get(k K, now time.Time) (V, bool) {
	s, ok := w.m[k]
	if !ok || now.Sub(s.at) > w.d {
		var zero V
		return zero, false
	}
	return s.v, true
}

// take is get, and removes k.
func (w *window[K, V]) take(k K, now time.Time) (V, bool) {
	v, ok := w.get(k, now)
	delete(w.m, k)
	return v, ok
}

func (w *window[K, V]) remove(k K) { delete(w.m, k) }

// forget drops the entries put more than d before now.
func (w *window[K, V]) forget(now time.Time) {
	for w.head < len(w.q) && now.Sub(w.q[w.head].at) > w.d {
		k := w.q[w.head]
		// Only the put this queue entry records: k may have been put again.
		if s, ok := w.m[k.v]; ok && s.at.Equal(k.at) {
			delete(w.m, k.v)
		}
		w.q[w.head] = stamped[K]{}
		w.head++
	}
	// Compact once the dropped half dominates.
	if w.head > len(w.q)/2 {
		w.q = append(w.q[:0], w.q[w.head:]...)
		w.head = 0
	}
}
