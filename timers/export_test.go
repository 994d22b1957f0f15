package timers

// Wakeups is how often s's dispatcher has woken up, for tests and
// benchmarks.
func Wakeups(s *Scheduler) int64 { return s.wakeups.Load() }

// ClaimCalls is how many claim calls s has made (lock.ClaimEach calls, or
// single claims on a backend that is not a lock.EachClaimer).
func ClaimCalls(s *Scheduler) int64 { return s.claimCalls.Load() }
