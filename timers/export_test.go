package timers

// Wakeups is how often s's dispatcher has woken up, for tests and
// benchmarks.
func Wakeups(s *Scheduler) int64 { return s.wakeups.Load() }

// ClaimCalls is how many claim calls s has made (lock.ClaimEach calls, or
// single claims on a backend that is not a lock.EachClaimer).
func ClaimCalls(s *Scheduler) int64 { return s.claimCalls.Load() }

// SlotCalls is how many slot calls s has made (one per instant with a
// claimed tick).
func SlotCalls(s *Scheduler) int64 { return s.slotCalls.Load() }
