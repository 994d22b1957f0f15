// Package leader elects one leader among the processes that share a
// lock.Lock, and runs a function for as long as — and only while — this
// process leads.
//
// Run campaigns until its context ends. Each time it wins, it calls fn with
// a context that carries the term (the grant's fencing token, see
// lock.TokenFrom) and that is cancelled the moment leadership can no longer
// be trusted; the lease is released only after fn returns, so a successor
// never overlaps a predecessor that is still winding down within its lease.
//
// # The state machine
//
//		follower ──win──▶ leader ──fn returns / lost / ctx ends──▶ release ──▶ follower (or return)
//
//	  - Follower: try the key "leader/<name>"; when it is held, wait for its
//	    release notification (lock.Waiter) or, at the latest, for the
//	    remaining lease the failed attempt reported (a crashed leader's lease
//	    runs out) or the retry interval, whichever comes first: a lost
//	    notification delays it by a retry interval at most. While the
//	    backend is unavailable it retries with jittered exponential backoff
//	    that starts at a quarter of the retry interval (100 ms at most) and
//	    grows to the retry interval.
//	  - Leader: the lease is kept from the win on: OnElected runs under it,
//	    then fn, unless the term already ended during OnElected (then fn is
//	    not called, and OnDemoted follows as for any term). Renew once per
//	    renew interval (WithRenewInterval). An unknown renewal outcome is
//	    retried; if no renewal has succeeded when less than a renew interval
//	    of the lease is left, the leader steps down: fn's context is
//	    cancelled (cause lock.ErrLost) while the lease is still valid, so fn
//	    has that margin to stop before anyone else can be elected. A renewal
//	    that reports the lease gone cancels fn at once. If fn panics, the
//	    lease is released and the term ends as any other (log, metrics,
//	    OnDemoted with ErrPanicked) before the panic leaves Run.
//	  - Shutdown: when Run's context ends, fn's context is cancelled; when fn
//	    returns the lease is released, which wakes the followers: a peer
//	    leads within a round trip (graceful resign).
//
// # The trust window
//
// A leader is sure of its leadership until its lease's ValidUntil (the send
// time of the last successful renewal plus the lease, minus drift). A paused
// process (GC, SIGSTOP) cannot see its lease end; when it resumes, its
// context is cancelled, but a write it had already started may land after
// a successor was elected. Stamp writes with the term and have the resource
// refuse terms older than the newest it has seen.
//
// Defaults follow Kubernetes' client-go: a ttl of 15 s (WithTTL, how long a
// crashed leader blocks the election), renew every 5 s (WithRenewInterval),
// retry every 2 s (WithRetryInterval, plus notifications). The renew
// interval must be at most a third of the ttl.
//
// # Owner, logs, metrics and traces
//
// WithCommon sets the lock.Common of Run: its Logger, MeterProvider and
// TracerProvider. A term's owner (Term.Owner, shown by Observe and the CLI)
// is the one its grant is stored with: the Lock's own (lock.Owned) when it
// states one, and then an Owner in WithCommon that differs from it is
// refused. A Lock that states none (a wrapper that hides its backend)
// reports the configured Owner, or a new one (lock.NewOwner).
//
// # Bad input
//
// Run refuses, before it campaigns, with an error that matches
// lock.ErrInvalidArgument, starts with "leader: " and names the argument
// or the option: an election name outside backendkit.CheckName's rule (1 to
// lock.MaxNameLen bytes of UTF-8, no control characters, no braces; Observe
// and ObserveAll's prefix follow the same rule); a ttl outside the
// backend's limits (lock.LimitsOf; lock.ErrInvalidTTL); a renew or retry
// interval below MinInterval (1 ms: a busy loop) or above lock.MaxTTL; a
// renew interval above a third of the ttl; a nil option; an owner that is
// not the Lock's. A grant won that lock.Keep refuses to keep (the
// WithKeeper Keeper is closed) is released, and Run returns Keep's error,
// which matches lock.ErrInvalidArgument, without announcing a term.
//
// Observe reports the current leader (owner, term, since) without
// campaigning; it needs a backend with lock.Inspector.
package leader
