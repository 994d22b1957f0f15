package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/memjobs"
)

// The checker must be able to fail: each history below breaks one rule.
func TestCheckerCatchesViolations(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ok := func(worker int, token uint64, from, to int) grant {
		return grant{Worker: worker, Token: token, Start: at(from), End: at(to), ValidUntil: at(to + 100), Release: "ok", ReleaseEnd: at(to + 1)}
	}
	share := func(g grant) grant { g.Shared = true; return g }
	for _, c := range []struct {
		name string
		h    *history
		want string
	}{
		{"clean", &history{Grants: []grant{ok(0, 1, 0, 100), ok(1, 2, 150, 300)}, Writes: []write{{Worker: 0, Token: 1, At: at(50)}}}, ""},
		{"overlap", &history{Grants: []grant{ok(0, 1, 0, 200), ok(1, 2, 150, 300)}}, "grant safety"},
		{"token order", &history{Grants: []grant{ok(0, 5, 0, 100), ok(1, 4, 150, 300)}}, "fencing"},
		{"write outside", &history{Grants: []grant{ok(0, 1, 0, 100)}, Writes: []write{{Worker: 0, Token: 1, At: at(150)}}}, "write outside the grant"},
		{"unknown token", &history{Grants: []grant{ok(0, 1, 0, 100)}, Writes: []write{{Worker: 0, Token: 9, At: at(50)}}}, "never granted"},
		{"early expiry", &history{Grants: []grant{{Worker: 0, Token: 1, Start: at(0), End: at(50), ValidUntil: at(500), Release: "lost", ReleaseEnd: at(60)}}}, "not conservative"},
		// Seed 199659 (TestNemesisSemaphore/redis): the restart came after the
		// work ended, while the Release was on its way; it was flagged.
		{"a restart while the Release was on its way", &history{Grants: []grant{{Worker: 0, Token: 1, Start: at(0), End: at(50), ValidUntil: at(500), Release: "lost", ReleaseEnd: at(60)}},
			Losses: []time.Time{at(55)}}, ""},
		// The reader-writer workload: shares overlap each other only.
		{"shares overlap", &history{Grants: []grant{share(ok(0, 1, 0, 200)), share(ok(1, 2, 100, 300)), ok(2, 3, 310, 400)}}, ""},
		{"shares reply out of token order", &history{Grants: []grant{share(ok(0, 2, 0, 200)), share(ok(1, 1, 10, 300)), ok(2, 3, 310, 400)}}, ""},
		{"a share overlaps a writer", &history{Grants: []grant{ok(0, 1, 0, 200), share(ok(1, 2, 150, 300))}}, "grant safety"},
		{"a writer overlaps a share", &history{Grants: []grant{share(ok(0, 1, 0, 200)), share(ok(1, 2, 10, 100)), ok(2, 3, 150, 300)}}, "grant safety"},
		{"a writer's token below a share's", &history{Grants: []grant{share(ok(0, 5, 0, 100)), ok(1, 4, 150, 300)}}, "fencing"},
		{"a share's token below a writer's", &history{Grants: []grant{ok(0, 5, 0, 100), share(ok(1, 4, 150, 300))}}, "fencing"},
		{"overlap with an earlier, longer grant", &history{Grants: []grant{ok(0, 1, 0, 500), ok(1, 2, 600, 700), ok(2, 3, 400, 450)}}, "grant safety"},
		{"semaphore over its size", &history{Limit: 2, Grants: []grant{
			{Worker: 0, Key: "s0", Token: 1, Start: at(0), End: at(100), ValidUntil: at(200), Release: "ok"},
			{Worker: 1, Key: "s1", Token: 1, Start: at(10), End: at(100), ValidUntil: at(200), Release: "ok"},
			{Worker: 2, Key: "s2", Token: 1, Start: at(20), End: at(100), ValidUntil: at(200), Release: "ok"}}}, "limit"},
		{"freed by a reset, holder never told", &history{ResetFrees: true, Cuts: []cut{{Worker: 0, Kind: "reset", From: at(50), To: at(50)}},
			Grants: []grant{ok(0, 1, 0, 200), ok(1, 2, 60, 300)}}, "loss not reported"},
		{"freed by a reset, holder told", &history{ResetFrees: true, Cuts: []cut{{Worker: 0, Kind: "reset", From: at(50), To: at(50)}},
			Grants: []grant{{Worker: 0, Token: 1, Start: at(0), End: at(200), ValidUntil: at(300), LossSeen: true, Release: "lost", ReleaseEnd: at(201)}, ok(1, 2, 60, 300)}}, ""},
		{"overlap across a restart", &history{Grants: []grant{ok(0, 1, 0, 200), ok(1, 2, 150, 300)}, Losses: []time.Time{at(100)}}, "loss not reported"},
		{"a restart within the grant", &history{Grants: []grant{ok(0, 1, 0, 200), ok(1, 2, 250, 300)},
			Losses: []time.Time{at(100)}, LossesEnd: []time.Time{at(150)}}, "loss not reported"},
		// A failover excuses no overlap, also where it forgets every grant
		// (PostgreSQL, whose new primary quarantines their keys); the
		// holders of the grants it forgot must have been told.
		{"overlap across a failover", &history{Grants: []grant{ok(0, 1, 0, 200), ok(1, 2, 150, 300)},
			Failovers: []cut{{Worker: -1, Kind: "crash", From: at(100), To: at(140)}}}, "grant safety"},
		{"overlap across a failover that forgot the grant, holder told", &history{Quarantines: true,
			Failovers: []cut{{Worker: -1, Kind: "crash", From: at(100), To: at(140)}},
			Grants:    []grant{{Worker: 0, Token: 1, Start: at(0), End: at(200), ValidUntil: at(300), LossSeen: true, Release: "lost", ReleaseEnd: at(201)}, ok(1, 2, 150, 300)}}, "grant safety"},
		{"a failover that forgot the grant, holder never told", &history{Quarantines: true,
			Failovers: []cut{{Worker: -1, Kind: "crash", From: at(100), To: at(140)}},
			Grants:    []grant{ok(0, 1, 0, 200), ok(1, 2, 250, 300)}}, "loss not reported"},
		// Seed 602766 (TestFailoverPostgres): a Release after the failover
		// found the grant forgotten; it was flagged as not conservative.
		{"a failover that forgot the grant, Release told", &history{Quarantines: true,
			Failovers: []cut{{Worker: -1, Kind: "crash", From: at(100), To: at(140)}},
			Grants:    []grant{{Worker: 0, Token: 1, Start: at(0), End: at(150), ValidUntil: at(300), Release: "lost", ReleaseEnd: at(150)}, ok(1, 2, 310, 400)}}, ""},
		{"a Release that found the grant gone across a failover that keeps grants", &history{
			Failovers: []cut{{Worker: -1, Kind: "crash", From: at(100), To: at(140)}},
			Grants:    []grant{{Worker: 0, Token: 1, Start: at(0), End: at(150), ValidUntil: at(300), Release: "lost", ReleaseEnd: at(150)}, ok(1, 2, 310, 400)}}, "not conservative"},
		// A restart of a quarantining server (PostgreSQL) excuses no
		// overlap either.
		{"overlap across a quarantined restart", &history{Quarantines: true, Grants: []grant{
			{Worker: 0, Token: 1, Start: at(0), End: at(200), ValidUntil: at(300), LossSeen: true, Release: "lost", ReleaseEnd: at(201)}, ok(1, 2, 150, 300)},
			Losses: []time.Time{at(100)}, LossesEnd: []time.Time{at(120)}}, "grant safety"},
		// A holder cut off from the server (alone, or with a group) at its
		// ValidUntil, and still holding then, must be told by its lease then.
		{"cut off at its ValidUntil, never told", &history{Cuts: []cut{{Worker: 0, Kind: "partition", From: at(50), To: at(300)}},
			Grants: []grant{{Worker: 0, Token: 1, Start: at(0), End: at(200), ValidUntil: at(200), Kept: true, Release: "error", ReleaseEnd: at(400)}, ok(1, 2, 310, 400)}}, "loss not told"},
		{"cut off at its ValidUntil, told late", &history{Cuts: []cut{{Worker: 0, Kind: "blackhole", From: at(50), To: at(600)}},
			Grants: []grant{{Worker: 0, Token: 1, Start: at(0), End: at(200), ValidUntil: at(200), LossSeen: true, LossAt: at(500), Kept: true, Release: "error", ReleaseEnd: at(600)}}}, "told late"},
		{"cut off at its ValidUntil, told", &history{Cuts: []cut{{Worker: 0, Kind: "partition", From: at(50), To: at(300)}},
			Grants: []grant{{Worker: 0, Token: 1, Start: at(0), End: at(200), ValidUntil: at(200), LossSeen: true, LossAt: at(201), Kept: true, Release: "error", ReleaseEnd: at(400)}, ok(1, 2, 310, 400)}}, ""},
		{"cut off, released before its ValidUntil", &history{Cuts: []cut{{Worker: 0, Kind: "partition", From: at(50), To: at(300)}},
			Grants: []grant{{Worker: 0, Token: 1, Start: at(0), End: at(100), ValidUntil: at(200), Kept: true, Release: "error", ReleaseEnd: at(250)}, ok(1, 2, 310, 400)}}, ""},
		// Seed 726664 (TestNemesisSemaphore/postgres): the restart began 2 ms
		// before the work ended and took the server down after the Release
		// was answered; it was flagged.
		{"a restart that began before the grant's end and returned after", &history{Grants: []grant{ok(0, 1, 0, 60), ok(1, 2, 250, 300)},
			Losses: []time.Time{at(58)}, LossesEnd: []time.Time{at(110)}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := c.h.check()
			switch {
			case c.want == "" && len(bad) > 0:
				t.Fatalf("violations in a clean history: %v", bad)
			case c.want != "" && (len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), c.want)):
				t.Fatalf("want a %q violation, got %v", c.want, bad)
			}
		})
	}
}

// The tick checks must be able to fail too.
func TestTickCheckerCatchesViolations(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	run := func(worker int, tick, from, to int) grant {
		return grant{Worker: worker, Key: "slot0", Token: uint64(from), Tick: at(tick), Start: at(from), End: at(to), ValidUntil: at(to), Release: "unobserved"}
	}
	// Every tick of a 3 s run ran once, at 250 ms intervals.
	every := func() []grant {
		var gs []grant
		for tick := 0; tick <= 3000; tick += 250 {
			gs = append(gs, run(tick/250%4, tick, tick+5, tick+50))
		}
		return gs
	}
	base := func(gs []grant) *history {
		return &history{Interval: 250 * time.Millisecond, Begin: at(0), Finish: at(3000), Grants: gs}
	}
	twice := append(every(), run(3, 1000, 1080, 1100))
	for _, c := range []struct {
		name string
		h    *history
		want string
	}{
		{"clean", base(every()), ""},
		{"a tick ran twice", base(twice), "once per tick"},
		{"twice across a restart that lost the claim", func() *history { h := base(twice); h.Losses = []time.Time{at(1050)}; return h }(), ""},
		{"twice, a restart outside the claim window", func() *history { h := base(twice); h.Losses = []time.Time{at(1500)}; return h }(), "once per tick"},
		{"twice after a reset that frees the claim", func() *history {
			h := base(twice)
			h.ResetFrees, h.Cuts = true, []cut{{Worker: 0, Kind: "reset", From: at(1060), To: at(1060)}}
			return h
		}(), ""},
		{"twice after a reset where resets free nothing", func() *history {
			h := base(twice)
			h.Cuts = []cut{{Worker: 0, Kind: "reset", From: at(1060), To: at(1060)}}
			return h
		}(), "once per tick"},
		{"twice across a failover", func() *history {
			h := base(twice)
			h.Failovers = []cut{{Worker: -1, Kind: "crash", From: at(1040), To: at(1090)}}
			return h
		}(), "once per tick"},
		{"most ticks missed", base(every()[:3]), "liveness"},
		{"ticks missed during failovers only", func() *history {
			h := base(every()[:3])
			h.Failovers = []cut{{Worker: -1, Kind: "crash", From: at(700), To: at(1800)}}
			return h
		}(), ""},
		// Within a ttl after a failover's second of grace, a slot can stay
		// taken by a release the failover lost, and PostgreSQL grants
		// nothing (pglock's quarantine). Seed 770725 (TestFailoverPostgres,
		// long tier, a failover every 2.5 s with a 10 s ttl) ran 3 of 46
		// ticks; seed 572136 (TestFailoverCluster) 0 of the 1 tick after
		// its slot's release was lost.
		{"ticks missed within a ttl after a failover", func() *history {
			h := base(every()[:2])
			h.Failovers = []cut{{Worker: -1, Kind: "crash", From: at(300), To: at(400)}}
			h.TTL = time.Second
			return h
		}(), ""},
		{"ticks missed beyond a ttl after a failover", func() *history {
			h := base(every()[:2])
			h.Failovers = []cut{{Worker: -1, Kind: "crash", From: at(300), To: at(400)}}
			h.TTL = 100 * time.Millisecond
			return h
		}(), "liveness"},
		// A restart that lost the grants is an outage as a failover is:
		// the server down, then pglock's quarantine for a ttl. Seed 978549
		// (TestNemesisTimers/postgres, CI of stop 30): four restarts in
		// 3 s, and 7 of 24 ticks ran.
		{"ticks missed within a ttl after restarts that lost the grants", func() *history {
			h := base(every()[:2])
			h.Losses, h.LossesEnd = []time.Time{at(300), at(350)}, []time.Time{at(320), at(400)}
			h.TTL = time.Second
			return h
		}(), ""},
		{"ticks missed beyond a ttl after a restart that lost the grants", func() *history {
			h := base(every()[:2])
			h.Losses, h.LossesEnd = []time.Time{at(300)}, []time.Time{at(400)}
			h.TTL = 100 * time.Millisecond
			return h
		}(), "liveness"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := c.h.checkTicks()
			switch {
			case c.want == "" && len(bad) > 0:
				t.Fatalf("violations in a clean history: %v", bad)
			case c.want != "" && (len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), c.want)):
				t.Fatalf("want a %q violation, got %v", c.want, bad)
			}
		})
	}
	// Two runs of one slot that overlap break the concurrency limit.
	h := base([]grant{run(0, 0, 5, 400), run(1, 250, 255, 300)})
	if bad := h.check(); len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), "limit") {
		t.Fatalf("overlapping runs with one slot: %v", bad)
	}
}

// The jobs ledger's checks must be able to fail too.
func TestJobsCheckerCatchesViolations(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Two jobs submitted; job-0000 completed; f sets job-0001's fate.
	ledgerWith := func(f func(h *history)) *history {
		lg := newLedger()
		lg.Submitted = 2
		lg.Completed["job-0000"] = 1
		h := &history{Jobs: lg}
		f(h)
		return h
	}
	for _, c := range []struct {
		name    string
		h       *history
		tracked bool // job-0001 is still tracked in the registry
		want    string
	}{
		{"clean", ledgerWith(func(h *history) { h.Jobs.Completed["job-0001"] = 2 }), false, ""},
		{"lost", ledgerWith(func(*history) {}), false, "job lost"},
		{"still in flight", ledgerWith(func(*history) {}), true, "in flight"},
		{"stale Done, no fault", ledgerWith(func(h *history) {
			h.Jobs.Unsure = []doneCall{{Worker: 1, ID: "job-0001", From: at(0), To: at(10), Result: "stale"}}
		}), false, "job lost"},
		// Done is idempotent per epoch: a client's retry of a Done that took
		// effect says nil, so a stale Done during a fault excuses nothing.
		{"stale Done during a fault", ledgerWith(func(h *history) {
			h.Jobs.Unsure = []doneCall{{Worker: 1, ID: "job-0001", From: at(0), To: at(10), Result: "stale"}}
			h.Cuts = []cut{{Worker: 1, Kind: "blackhole", From: at(5), To: at(300)}}
		}), false, "job lost"},
		{"unanswered Done", ledgerWith(func(h *history) {
			h.Jobs.Unsure = []doneCall{{Worker: 1, ID: "job-0001", From: at(0), To: at(10), Result: "i/o timeout"}}
		}), false, ""},
		{"lost by a restart that lost the registry", ledgerWith(func(h *history) {
			h.Jobs.Tracked["job-0001"] = at(0)
			h.Losses = []time.Time{at(100)}
		}), false, ""},
		// Tracked after the restart began, answered by the old server
		// before it was killed (seed 163876).
		{"lost by a restart that had begun", ledgerWith(func(h *history) {
			h.Jobs.Tracked["job-0001"] = at(105)
			h.Losses, h.LossesEnd = []time.Time{at(100)}, []time.Time{at(120)}
		}), false, ""},
		{"tracked after a restart returned", ledgerWith(func(h *history) {
			h.Jobs.Tracked["job-0001"] = at(130)
			h.Losses, h.LossesEnd = []time.Time{at(100)}, []time.Time{at(120)}
		}), false, "job lost"},
		{"lost across a failover", ledgerWith(func(h *history) {
			h.Jobs.Tracked["job-0001"] = at(0)
			h.Failovers = []cut{{Worker: -1, Kind: "crash", From: at(100), To: at(200)}}
		}), false, "job lost"},
		{"dead within MaxRetries", ledgerWith(func(h *history) { h.Jobs.Dead["job-0001"] = jobMaxRetries }), false, "buried"},
		{"dead after MaxRetries", ledgerWith(func(h *history) { h.Jobs.Dead["job-0001"] = jobMaxRetries + 1 }), false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := memjobs.New()
			if c.tracked {
				if _, err := reg.Track(t.Context(), jobs.Job{ID: "job-0001"}, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			bad := c.h.checkJobs(t.Context(), reg, newQueue())
			switch {
			case c.want == "" && len(bad) > 0:
				t.Fatalf("violations in a clean history: %v", bad)
			case c.want != "" && (len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), c.want)):
				t.Fatalf("want a %q violation, got %v", c.want, bad)
			}
		})
	}
}
