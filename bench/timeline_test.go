package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// timeline records, for BenchmarkTimersAtScale, when a client's script
// calls went out and came back, by the kind of script (told apart by the
// shape of their arguments: redislock's claim_each, acquire_each and
// release_each calls), to show each phase of an aligned instant: from the
// instant to the first call sent and to the last reply.
type timeline struct {
	mu    sync.Mutex
	spans map[string][]span // by kind
}

type span struct {
	start, end time.Time
	scripts    int
	host       int
}

// hook is the go-redis hook that records host's calls in t.
func (t *timeline) hook(host int) redis.Hook { return timelineHook{t, host} }

type timelineHook struct {
	t    *timeline
	host int
}

func (h timelineHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h timelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.t.add(kindOf(cmd.Args()), span{start, time.Now(), 1, h.host})
		return err
	}
}
func (h timelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		if len(cmds) > 0 {
			h.t.add(kindOf(cmds[0].Args()), span{start, time.Now(), len(cmds), h.host})
		}
		return err
	}
}

func (t *timeline) add(kind string, s span) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.spans == nil {
		t.spans = map[string][]span{}
	}
	t.spans[kind] = append(t.spans[kind], s)
}

// kindOf names a script call by its arguments' shape: claims (2 keys and
// 2 arguments each), slots (acquire_each: 2 keys and 4
// arguments per request of one key, plus one), releases (4 keys and 3
// arguments each, plus two), renewals (renew_batch); "other" for the
// rest.
func kindOf(args []any) string {
	if len(args) < 3 {
		return "other"
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	if name != "evalsha" && name != "eval" {
		return "other"
	}
	nk, err := strconv.Atoi(argString(args[2]))
	if err != nil || nk == 0 {
		return "other"
	}
	switch n := len(args); {
	case n == 3+2*nk:
		// claim_each: a tail and a ttl per claim of two keys.
		return "claims"
	case n == 4+2*nk:
		// renew_batch: the ttl, then a value per key.
		return "renewals"
	case n == 4+3*nk:
		return "slots"
	case nk%4 == 0 && n == 5+7*nk/4:
		return "releases"
	}
	return "other"
}

// argString is a command argument as go-redis writes it (redislock
// passes some by pointer).
func argString(a any) string {
	switch v := a.(type) {
	case *string:
		return *v
	case *int64:
		return strconv.FormatInt(*v, 10)
	}
	return fmt.Sprint(a)
}

// summary: per kind, over the whole seconds from first to last, the
// median of (the first call's start, the last reply's end) after the
// second, and the round trips and scripts per instant; when aligned (the
// timers due at the whole seconds), the seconds whose claims came back
// late.
func (t *timeline) summary(first, last time.Time, aligned bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	kinds := make([]string, 0, len(t.spans))
	for k := range t.spans {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	instants := int(last.Sub(first)/time.Second) + 1
	for _, k := range kinds {
		var starts, ends []time.Duration
		trips, scripts := 0, 0
		for sec := first; !sec.After(last); sec = sec.Add(time.Second) {
			var s0, e0 time.Duration = -1, -1
			for _, s := range t.spans[k] {
				if s.start.Before(sec) || !s.start.Before(sec.Add(time.Second)) {
					continue
				}
				trips++
				scripts += s.scripts
				if d := s.start.Sub(sec); s0 < 0 || d < s0 {
					s0 = d
				}
				if d := s.end.Sub(sec); d > e0 {
					e0 = d
				}
			}
			if s0 >= 0 {
				starts, ends = append(starts, s0), append(ends, e0)
			}
		}
		if len(starts) == 0 {
			continue
		}
		slices.Sort(starts)
		slices.Sort(ends)
		out = append(out, fmt.Sprintf("timeline %s: first sent %v, last back %v after the second (medians; latest %v); %.1f round trips, %.1f scripts per instant",
			k, starts[len(starts)/2].Round(time.Millisecond), ends[len(ends)/2].Round(time.Millisecond), ends[len(ends)-1].Round(time.Millisecond),
			float64(trips)/float64(instants), float64(scripts)/float64(instants)))
	}
	// The seconds whose claims came back late (past 450 ms: the misfire
	// threshold of an every-second timer is 500 ms), with, per host, when
	// each kind of call went out first and came back last in them, and the
	// other commands (a size check's SCANs) sent from a second before.
	if !aligned {
		return out
	}
	var lates []time.Duration
	for sec := first; !sec.After(last); sec = sec.Add(time.Second) {
		var claimsBack time.Duration
		for _, s := range t.spans["claims"] {
			if !s.start.Before(sec) && s.start.Before(sec.Add(time.Second)) {
				claimsBack = max(claimsBack, s.end.Sub(sec))
			}
		}
		lates = append(lates, claimsBack)
		if claimsBack <= 450*time.Millisecond {
			continue
		}
		var sb strings.Builder
		for _, k := range kinds {
			byHost := map[int][2]time.Duration{}
			for _, s := range t.spans[k] {
				from := sec
				if k == "other" || k == "releases" {
					from = sec.Add(-time.Second)
				}
				if s.start.Before(from) || !s.start.Before(sec.Add(time.Second)) {
					continue
				}
				b, ok := byHost[s.host]
				if !ok {
					b[0] = s.start.Sub(sec)
				}
				b[0], b[1] = min(b[0], s.start.Sub(sec)), max(b[1], s.end.Sub(sec))
				byHost[s.host] = b
			}
			for h := range 3 {
				if b, ok := byHost[h]; ok {
					fmt.Fprintf(&sb, " %s@%d %v-%v", k, h, b[0].Round(time.Millisecond), b[1].Round(time.Millisecond))
				}
			}
		}
		out = append(out, fmt.Sprintf("timeline: second %d of the window, claims back %v after it:%s", int(sec.Sub(first)/time.Second), claimsBack.Round(time.Millisecond), sb.String()))
	}
	slices.Sort(lates)
	if len(lates) > 0 {
		out = append(out, fmt.Sprintf("timeline: the instants' claims back p50 %v, p90 %v, max %v after the second",
			lates[len(lates)/2].Round(time.Millisecond), lates[len(lates)*9/10].Round(time.Millisecond), lates[len(lates)-1].Round(time.Millisecond)))
	}
	return out
}
