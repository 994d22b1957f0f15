// Command leasehold inspects and operates what leasehold keeps on a
// backend: grants, semaphores, elections, timers and jobs.
//
//	leasehold locks [PREFIX]            grants: key, owner, token, remaining ttl, age
//	leasehold semaphore NAME [--size N] slot occupancy
//	leasehold leader [NAME]             leader: owner, term, since
//	leasehold timers [PREFIX]           latest claimed tick and its host, runs in progress
//	leasehold jobs                      in flight (owner, attempt, heartbeat age), expired, dead
//	leasehold jobs retry ID             put a dead job back in flight for the application to requeue
//	leasehold jobs purge ID --yes       delete a dead job
//	leasehold release KEY --force       remove a grant whoever holds it
//	leasehold dashboard [--addr A] [--allow-actions] [--allow-remote]
//
// The backend is a URL (--backend, or $LEASEHOLD_BACKEND): mem://NAME,
// redis://[:password@]host:port, rediss://…, redis+cluster://[:password@]host:port,…,
// redis+sentinel://[:password@]host:port,…/master-name[?db=N] (the primary
// that the Sentinels name), postgres://… (several host:port with
// target_session_attrs=read-write reach whichever is the primary),
// etcd://[user:password@]host:port,host:port. A URL is never
// printed as given: its password, and query parameters such as password=,
// show as xxxxx; a URL that does not parse shows its scheme only; a
// keyword connection string (host=… password=…) is refused and not shown.
// The jobs registry is on the same server unless --jobs names another
// (etcd has none): redisjobs in --namespace (default leasehold:jobs),
// pgjobs in --table (default leasehold_jobs). Output is a table for people,
// or JSON with --json (durations in milliseconds, times in RFC 3339).
// Tables list at most --limit rows (default 100, at most 1000) and say how
// many more there are; jobs lists are bounded queries of the registry.
//
// Text read from the backend (keys, owners, IDs, reasons) is shown quoted,
// as Go's %q does, when it has a character that is not printable (control
// characters, escape sequences, invalid UTF-8) or starts with a double
// quote: it cannot drive the terminal or forge a row. A KEY or ID argument
// that starts with a double quote is read back that way (strconv.Unquote),
// so that any key or dead job can be named: jobs retry '"job\x00one"'.
// JSON keeps text exact except invalid UTF-8, which encoding/json replaces
// by U+FFFD: a key or job ID that is not valid UTF-8 also has its bytes in
// key_base64 or id_base64 (standard base64).
//
// Bad input (a flag out of range, an empty or oversized key, an invalid
// name, a bad URL) is exit 2, found before the backend is opened. Under
// --json an error is a JSON object on stdout: {"error": message, "kind":
// usage | not_found | unavailable | timeout | failed, "exit": code,
// "hint": …}.
//
// Reading commands write nothing. The writes are release --force (the
// holder learns at its next renewal that it lost the key; its resource
// must check fencing tokens, as always), jobs retry (jobs.Revive: the job
// is tracked again, expired at once, and purged from the dead set; the
// application's leader-gated recovery scan requeues it through its own
// Requeue) and jobs purge.
//
// The dashboard serves one live page (refreshed every 2 s) on
// 127.0.0.1:8080 by default, and answers only requests for 127.0.0.1,
// localhost or [::1] with its port (a DNS rebinding page gets 421). A
// non-loopback --addr needs --allow-remote; then every request needs the
// per-start access token of the URL printed at start (…/?token=…, kept in
// a cookie after the first visit). It is read-only unless
// --allow-actions, which adds Retry and Purge buttons to dead jobs, behind
// a confirmation (a purge is confirmed on the server too); every action is
// logged on stderr (slog: action, job, remote address).
//
// Exit codes, for scripts:
//
//	0  success
//	1  the operation failed (backend unreachable or in error, or --timeout reached)
//	2  usage error (a bad flag, argument, URL or name), or a required confirmation flag (--force, --yes) is missing
//	3  not found: key not held, no leader, no such dead job
package main
