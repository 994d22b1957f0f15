// Package bench compares leasehold with the libraries teams use instead of
// it, on the same loopback servers in the same run: on Redis,
// github.com/bsm/redislock and github.com/go-redsync/redsync (one node);
// on etcd, the client's concurrency.Mutex; on PostgreSQL, raw session
// advisory locks; for cron timers, github.com/go-co-op/gocron/v2 with its
// Redis locker (github.com/go-co-op/gocron-redis-lock/v2). Each also runs
// against the raw floor of its backend where one exists.
//
// It is a module of its own so that the peers never enter leasehold's
// dependencies. Everything is in testing.B benchmarks (no test asserts a
// speed); the sub-benchmarks are named backend/library so that benchstat
// compares them:
//
//	BenchmarkUncontended   one TryAcquire + Release, nobody else on the key
//	BenchmarkContended     16 workers (one client each) on one key for 10 s:
//	                       ops/s, the least productive worker's share, and
//	                       the bytes and allocations per grant
//	BenchmarkHandoff       release → a waiter blocked the library's own way
//	                       holds the key: p50-µs and p99-µs
//	BenchmarkOncePerTick   three schedulers started 1/3 s apart run an
//	                       every-second job: duplicate and missed ticks
//	BenchmarkRecovery      a worker process with jobs in flight is SIGKILLed:
//	                       time until its jobs are requeued
//	BenchmarkJobsScale     10,000,000 tracked jobs on Redis and PostgreSQL:
//	                       the recovery scan and a heartbeat of 100,000, the
//	                       longest server call, a latency probe's p99
//	BenchmarkScaleLeases   100,000 leases held by one process through a
//	                       lock.Keeper for 5 minutes: round trips per
//	                       renewal period, goroutines, heap per lease,
//	                       losses, a latency probe's p99
//	BenchmarkMemory        leasehold alone, per backend (memlock too): heap
//	                       and goroutines per lease held under lock.Keep
//	                       and per caller blocked in lock.Acquire
//
// The semaphore (one round trip against the slot-0-first loop) and the
// recovery scan are measured by the benchmarks of the main module
// (semaphore.BenchmarkSemaphore, jobs.BenchmarkScan); the report command
// runs those too, so that docs/benchmarks.md has every figure:
//
//	go -C bench run ./cmd/report
//
// Each benchmark runs by itself too, for example
//
//	go -C bench test -run '^$' -bench '^BenchmarkContended$/redis/' -benchtime 1x
//	go -C bench test -run '^$' -bench '^BenchmarkMemory$' -benchtime 1x
//
// With -short the long workloads shrink (1 s of contention, 3 ticks, one
// kill): that is the smoke run scripts/test does.
package bench
