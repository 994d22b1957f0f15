package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold-go/leasehold/lock/internal/kit"
)

// The toolkit functions whose only copy is here, handed to backendkit.
func init() {
	kit.AcquireWith = func(ctx context.Context, l Lock, keys []string, try func(context.Context) (Handle, error), opts []Option) (Handle, error) {
		cfg, err := newOptions(opts)
		if err != nil {
			return nil, err
		}
		return acquireWith(ctx, cfg, l, keys, try)
	}
	kit.HelperOption = withTelemetry
	kit.CheckContext = checkContext
	kit.Validate = validate
	kit.ValidateGroup = validateGroup
	kit.Lost = lost
}

// Acquire blocks until it holds key for ttl or ctx ends.
//
// On a backend that implements Queue it waits in the server's own queue
// for the key (retrying with backoff while the backend is unavailable).
// On a backend that implements Waiter it subscribes to the key's releases
// before the first attempt and sleeps until a release is announced; the
// remaining ttl that a failed attempt reports bounds the sleep, so a key
// whose holder crashed is retried as soon as its grant expires. Without a
// Waiter it retries with jittered exponential backoff (WithBackoff), never
// sleeping past the reported remaining ttl. Errors that say the backend is
// unavailable are retried with backoff too; invalid input is returned at
// once. When ctx ends, the error is ctx's cause.
func Acquire(ctx context.Context, l Lock, key string, ttl time.Duration, opts ...Option) (Handle, error) {
	cfg, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return acquire(ctx, cfg, l, key, ttl)
}

func acquire(ctx context.Context, cfg *options, l Lock, key string, ttl time.Duration) (Handle, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil Lock", ErrInvalidArgument)
	}
	if err := validate(ctx, key, ttl, LimitsOf(l)); err != nil {
		return nil, err
	}
	if q, ok := l.(Queue); ok {
		// The queue is the waiting: acquireWith only retries what failed
		// for want of the backend.
		return acquireWith(ctx, cfg, lockOnly{l}, []string{key}, func(ctx context.Context) (Handle, error) {
			return q.AcquireQueued(ctx, key, ttl)
		})
	}
	return acquireWith(ctx, cfg, l, []string{key}, func(ctx context.Context) (Handle, error) {
		return l.TryAcquire(ctx, key, ttl)
	})
}

// lockOnly hides a Lock's optional capabilities.
type lockOnly struct{ Lock }

// acquireWith is the waiting loop behind Acquire, and backendkit.AcquireWith
// for the packages built on lock (the semaphore waits on all its slots with
// it). try makes one attempt over keys; acquireWith subscribes to keys'
// releases when l is a Waiter and retries try until it succeeds, fails with
// an error other than ErrNotAcquired or ErrUnavailable, or ctx ends.
func acquireWith(ctx context.Context, cfg *options, l Lock, keys []string, try func(context.Context) (Handle, error)) (h Handle, err error) {
	tel := cfg.tel
	start := time.Now()
	// A span only when it can be recorded: the global provider without an
	// SDK would make a non-recording one, for nothing.
	var span trace.Span
	if tel.Tracing() {
		ctx, span = tel.Tracer.Start(ctx, "leasehold.lock.Acquire",
			trace.WithAttributes(attribute.StringSlice("leasehold.keys", keys)))
	}
	defer func() {
		outcome := "acquired"
		switch {
		case err == nil:
		case ctx.Err() != nil:
			outcome = "cancelled"
		default:
			outcome = "error"
		}
		if span != nil {
			endSpan(span, h, err, outcome)
		}
		rctx := ctx
		if ctx.Err() != nil { // recorded all the same
			rctx = context.WithoutCancel(ctx)
		}
		tel.Wait(rctx, start, outcome)
	}()

	var sub Subscription
	if w, ok := l.(Waiter); ok {
		sub, err = w.Subscribe(ctx, keys...)
		if err != nil {
			if ctx.Err() != nil {
				// The backend's error may be the cancellation seen from
				// inside (a stream that closed); the caller asked why.
				return nil, errors.Join(context.Cause(ctx), err)
			}
			if errors.Is(err, ErrInvalidArgument) {
				return nil, err
			}
			// No notifications: fall back to backoff, which is still correct.
			cfg.logger().Debug("leasehold: release notifications unavailable, polling", "keys", keys, "err", err)
			sub = nil
		} else {
			defer sub.Close()
		}
	}

	b := backoff{min: cfg.minBackoff, max: cfg.maxBackoff}
	// On a SharedLock, a waiting writer's refused attempts are what keep
	// new readers off (IntentTTL): attempt at least every half of it.
	maxWait := time.Duration(1<<63 - 1)
	if _, ok := l.(SharedLock); ok {
		maxWait = IntentTTL / 2
	}
	for {
		h, err := try(ctx)
		if err == nil {
			return h, nil
		}
		if ctx.Err() != nil {
			return nil, errors.Join(context.Cause(ctx), err)
		}
		notAcquired := errors.Is(err, ErrNotAcquired)
		if !notAcquired && !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		hint := RemainingTTL(err)
		var werr error
		switch {
		case sub != nil && notAcquired:
			// A release notification is the fast path; the hint covers a
			// holder that crashed and will never release.
			wait := cfg.maxBackoff
			if hint > 0 {
				wait = hint + jitter(hint)
			}
			werr = sub.Wait(ctx, min(wait, maxWait))
		default:
			if !notAcquired {
				cfg.logger().Debug("leasehold: acquire attempt failed, retrying", "keys", keys, "err", err)
			}
			d := b.next()
			if notAcquired && hint > 0 && hint < d {
				d = hint + jitter(hint)
			}
			werr = kit.Sleep(ctx, min(d, maxWait))
		}
		if werr != nil {
			if ctx.Err() != nil {
				return nil, errors.Join(context.Cause(ctx), err)
			}
			return nil, werr
		}
	}
}

// endSpan ends an Acquire's span with its outcome.
func endSpan(span trace.Span, h Handle, err error, outcome string) {
	if err == nil {
		span.SetAttributes(attribute.Int64("leasehold.token", int64(h.Token())))
	} else {
		span.RecordError(err)
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// jitter spreads the wake-ups of waiters that got the same hint: up to a
// twentieth of it, at most 20 ms, at least 1 ms.
func jitter(hint time.Duration) time.Duration {
	j := min(hint/20, 20*time.Millisecond)
	if j < time.Millisecond {
		return time.Millisecond
	}
	return time.Millisecond + rand.N(j)
}

type backoff struct {
	min, max, cur time.Duration
}

// next returns a delay in [cur/2, cur] and doubles cur up to max.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	}
	d := b.cur/2 + rand.N(b.cur/2+1)
	// Doubling without overflow, whatever WithBackoff allowed.
	if b.cur > b.max/2 {
		b.cur = b.max
	} else {
		b.cur *= 2
	}
	return d
}
