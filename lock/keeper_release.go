package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// releaser sends the Releases of a Keeper's leases to the backend
// together (a group commit): a release that finds none in flight goes at
// once, on its caller's goroutine, in a ReleaseEach of its own; the
// releases that arrive while a ReleaseEach is in flight go together in the
// next one, up to keeperReleaseChunk handles each, sent by one flush
// goroutine that exits when nothing is left to send. On a backend that is
// not an EachReleaser each handle is released on its own, as before.
type releaser struct {
	l Lock

	mu      sync.Mutex
	busy    bool // a ReleaseEach is in flight (a lone release's, or the flush's)
	pending []*releaseReq
}

// releaseReq is one Release waiting for its turn.
type releaseReq struct {
	ctx  context.Context
	h    Handle
	err  error
	done chan struct{} // closed when err is set
}

// release releases h with the others pending, and returns its own outcome
// or, if ctx ends first, ctx's cause (the release may still be made).
func (r *releaser) release(ctx context.Context, h Handle) error {
	if _, ok := r.l.(EachReleaser); !ok {
		return h.Release(ctx)
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	if !r.busy {
		r.busy = true
		r.mu.Unlock()
		err := releaseOne(ctx, r.l, h)
		r.mu.Lock()
		r.next()
		r.mu.Unlock()
		return err
	}
	req := &releaseReq{ctx: ctx, h: h, done: make(chan struct{})}
	r.pending = append(r.pending, req)
	r.mu.Unlock()
	select {
	case <-req.done:
		return req.err
	case <-ctx.Done():
		select {
		case <-req.done:
			// Answered as ctx ended: a definite answer stands (an
			// unknown one may be the end of ctx itself).
			if req.err == nil || errors.Is(req.err, ErrLost) {
				return req.err
			}
		default:
		}
		return context.Cause(ctx)
	}
}

// next, with r.mu held once a ReleaseEach returned, starts the flush of
// the releases that arrived meanwhile, or ends the busy spell.
func (r *releaser) next() {
	if len(r.pending) > 0 {
		go r.flush()
		return
	}
	r.busy = false
	r.pending = nil
}

// flush sends the pending releases, a chunk per ReleaseEach, until none
// is left.
func (r *releaser) flush() {
	for {
		r.mu.Lock()
		if len(r.pending) == 0 {
			r.next()
			r.mu.Unlock()
			return
		}
		n := min(len(r.pending), keeperReleaseChunk)
		reqs := r.pending[:n:n]
		r.pending = r.pending[n:]
		r.mu.Unlock()
		r.send(reqs)
	}
}

// send releases reqs in one ReleaseEach, under a context that no caller's
// cancellation ends for the others: when every request's context has a
// deadline (as Hold's releases have), it ends at the latest of them (one
// timer per call); otherwise when every request's context has ended. A
// request whose context ended before is not sent.
func (r *releaser) send(reqs []*releaseReq) {
	live := reqs[:0]
	var latest time.Time
	deadlines := true
	for _, q := range reqs {
		if err := q.ctx.Err(); err != nil {
			q.err = context.Cause(q.ctx)
			close(q.done)
			continue
		}
		live = append(live, q)
		if d, ok := q.ctx.Deadline(); !ok {
			deadlines = false
		} else if d.After(latest) {
			latest = d
		}
	}
	if len(live) == 0 {
		return
	}
	hs := make([]Handle, len(live))
	for i, q := range live {
		hs[i] = q.h
	}
	var errs []error
	if deadlines {
		ctx, cancel := context.WithDeadline(context.WithoutCancel(live[0].ctx), latest)
		errs = ReleaseEach(ctx, r.l, hs)
		cancel()
	} else {
		ctx, cancel := context.WithCancel(context.WithoutCancel(live[0].ctx))
		var waiting atomic.Int64
		waiting.Store(int64(len(live)))
		stops := make([]func() bool, len(live))
		for i, q := range live {
			stops[i] = context.AfterFunc(q.ctx, func() {
				if waiting.Add(-1) == 0 {
					cancel()
				}
			})
		}
		errs = ReleaseEach(ctx, r.l, hs)
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
	for i, q := range live {
		q.err = errs[i]
		close(q.done)
	}
}
