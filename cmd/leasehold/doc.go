// Command leasehold inspects and operates what leasehold keeps on a
// backend: grants, semaphores, elections, timers and jobs.
//
//	leasehold locks [PREFIX]            grants: key, owner, token, remaining ttl, age
//	leasehold semaphore NAME [--size N] slot occupancy
//	leasehold leader [NAME]             leader: identity, term, since
//	leasehold timers [PREFIX]           latest claimed tick and its host, runs in progress
//	leasehold jobs                      in flight (owner, attempt, heartbeat age), expired, dead
//	leasehold jobs retry ID             put a dead job back in flight for the application to requeue
//	leasehold jobs purge ID --yes       delete a dead job
//	leasehold release KEY --force       remove a grant whoever holds it
//	leasehold dashboard [--addr A] [--allow-actions] [--allow-remote]
//
// The backend is a URL (--backend, or $LEASEHOLD_BACKEND): mem://NAME,
// redis://host:port, rediss://…, postgres://…, etcd://host:port,host:port.
// The jobs registry is on the same server unless --jobs names another
// (etcd has none): redisjobs in --namespace (default leasehold:jobs),
// pgjobs in --table (default leasehold_jobs). Output is a table for people,
// or JSON with --json (durations in milliseconds, times in RFC 3339).
//
// Reading commands write nothing. The writes are release --force (the
// holder learns at its next renewal that it lost the key; its resource
// must check fencing tokens, as always), jobs retry (jobs.Revive: the job
// is tracked again, expired at once, and purged from the dead set; the
// application's leader-gated recovery scan requeues it through its own
// Requeue) and jobs purge.
//
// The dashboard serves one live page (refreshed every 2 s) on
// 127.0.0.1:8080 by default; a non-loopback --addr needs --allow-remote, as
// the page has no authentication. It is read-only unless --allow-actions,
// which adds Retry and Purge buttons to dead jobs, behind a confirmation.
//
// Exit codes, for scripts:
//
//	0  success
//	1  the operation failed (backend unreachable or in error)
//	2  usage error, or a required confirmation flag (--force, --yes) is missing
//	3  not found: key not held, no leader, no such dead job
package main
