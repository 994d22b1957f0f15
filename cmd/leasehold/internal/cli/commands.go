package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/semaphore"
)

// table writes aligned columns; rows are tab-separated.
func table(w io.Writer, header string, rows []string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	_ = tw.Flush()
}

// row joins the columns of a table row; a string column is shown as
// ops.Show does (quoted when it has a non-printable character: a tab, a
// newline or an escape sequence would forge a row or drive the terminal).
func row(cols ...any) string {
	s := make([]string, len(cols))
	for i, c := range cols {
		if str, ok := c.(string); ok {
			s[i] = ops.Show(str)
		} else {
			s[i] = fmt.Sprint(c)
		}
		if s[i] == "" {
			s[i] = "-"
		}
	}
	return strings.Join(s, "\t")
}

// more prints the line that says how many rows a table left out.
func (e *env) more(n int64, what string) {
	if n > 0 {
		fmt.Fprintf(e.stdout, "… and %d more %s (--limit %d shows at most %d; --json lists them)\n", n, what, e.c.limit, ops.MaxLimit)
	}
}

func (e *env) locks(ctx context.Context, src *ops.Source, prefix string) error {
	gs, err := src.Locks(ctx, prefix)
	if err != nil {
		return err
	}
	if e.c.json {
		return e.printJSON(gs)
	}
	if len(gs) == 0 {
		fmt.Fprintf(e.stdout, "no grants under %q\n", prefix)
		return nil
	}
	shown := gs[:min(len(gs), e.c.limit)]
	rows := make([]string, len(shown))
	groups := slices.ContainsFunc(shown, func(g ops.Grant) bool { return g.Group != "" })
	for i, g := range shown {
		rows[i] = row(g.Key, g.Holder(), g.Token, ops.MS(g.RemainingMS), ops.Ago(g.Since, e.now()))
		if groups {
			rows[i] += "\t" + cmp.Or(g.Group, "-")
		}
	}
	header := "KEY\tOWNER\tTOKEN\tREMAINING\tSINCE"
	if groups { // all-of grants: the keys granted together share a group
		header += "\tGROUP"
	}
	table(e.stdout, header, rows)
	e.more(int64(len(gs)-len(shown)), "grants")
	return nil
}

func (e *env) semaphore(ctx context.Context, src *ops.Source, name string, size int) error {
	s, err := src.Semaphore(ctx, name, size)
	if err != nil {
		return err
	}
	if e.c.json {
		return e.printJSON(s)
	}
	sz := "unknown size (no participant declared it in the last minute: pass --size)"
	if s.Size > 0 {
		sz = strconv.Itoa(s.Size) + " slots"
	}
	fmt.Fprintf(e.stdout, "semaphore %s: %d held, %s", ops.Show(s.Name), s.Held, sz)
	if len(s.Declared) > 1 {
		fmt.Fprintf(e.stdout, "; participants disagree on the size: %v", s.Declared)
	}
	if s.Ignored > 0 {
		fmt.Fprintf(e.stdout, "; %d size or slot keys out of range [1, %d] ignored", s.Ignored, semaphore.MaxSize)
	}
	fmt.Fprintln(e.stdout)
	if len(s.Slots) == 0 {
		return nil
	}
	shown := s.Slots[:min(len(s.Slots), e.c.limit)]
	rows := make([]string, len(shown))
	for i, sl := range shown {
		if sl.Grant == nil {
			rows[i] = row(sl.Slot, "free", "", "", "")
			continue
		}
		rows[i] = row(sl.Slot, sl.Grant.Owner, sl.Grant.Token, ops.MS(sl.Grant.RemainingMS), ops.Ago(sl.Grant.Since, e.now()))
	}
	table(e.stdout, "SLOT\tHOLDER\tTOKEN\tREMAINING\tSINCE", rows)
	e.more(int64(len(s.Slots)-len(shown)), "slots")
	return nil
}

func (e *env) leader(ctx context.Context, src *ops.Source, pos []string) error {
	var ls []ops.Leader
	if len(pos) == 1 {
		l, err := src.Leader(ctx, pos[0])
		if err != nil {
			return err
		}
		ls = []ops.Leader{l}
	} else {
		var err error
		if ls, err = src.Leaders(ctx, ""); err != nil {
			return err
		}
	}
	if e.c.json {
		if len(pos) == 1 {
			return e.printJSON(ls[0])
		}
		return e.printJSON(ls)
	}
	if len(ls) == 0 {
		fmt.Fprintln(e.stdout, "no elections have a leader")
		return nil
	}
	shown := ls[:min(len(ls), e.c.limit)]
	rows := make([]string, len(shown))
	for i, l := range shown {
		rows[i] = row(l.Name, l.Owner, l.Term, ops.Ago(l.Since, e.now()))
	}
	table(e.stdout, "ELECTION\tLEADER\tTERM\tSINCE", rows)
	e.more(int64(len(ls)-len(shown)), "elections")
	return nil
}

func (e *env) timers(ctx context.Context, src *ops.Source, prefix string) error {
	ts, err := src.Timers(ctx, prefix)
	if err != nil {
		return err
	}
	if e.c.json {
		return e.printJSON(ts)
	}
	if len(ts) == 0 {
		fmt.Fprintf(e.stdout, "no timer under %q has a live tick claim or a run in progress\n", prefix)
		return nil
	}
	var rows, runs []string
	shown := ts[:min(len(ts), e.c.limit)]
	for _, t := range shown {
		rows = append(rows, row(t.Name, ops.Ago(t.LastTick, e.now()), t.ClaimedBy, t.ClaimToken, len(t.Running)))
		for _, r := range t.Running {
			runs = append(runs, row(t.Name, r.Slot, r.Runner, r.Token, ops.Ago(r.Since, e.now()), ops.MS(r.RemainingMS)))
		}
	}
	table(e.stdout, "TIMER\tLAST TICK\tCLAIMED BY\tCLAIM TOKEN\tRUNNING", rows)
	e.more(int64(len(ts)-len(shown)), "timers")
	if len(runs) > 0 {
		fmt.Fprintln(e.stdout)
		table(e.stdout, "TIMER\tSLOT\tRUNNER\tTOKEN\tSTARTED\tLEASE LEFT", runs)
	}
	fmt.Fprintln(e.stdout, "\n(last outcome and duration are per host: see the application's Scheduler.Status)")
	return nil
}

func (e *env) jobs(ctx context.Context, src *ops.Source, pos []string) error {
	if len(pos) > 0 {
		if src.Jobs == nil {
			return src.JobsErr
		}
		id := pos[1]
		if pos[0] == "retry" {
			j, err := src.Retry(ctx, id)
			if err != nil {
				return err
			}
			if e.c.json {
				return e.printJSON(j)
			}
			fmt.Fprintf(e.stdout, "job %s is back in flight (attempt 0, expired): the application's recovery scan will requeue it\n", ops.Show(id))
			return nil
		}
		if err := src.Purge(ctx, id); err != nil {
			return err
		}
		if e.c.json {
			return e.printJSON(map[string]string{"purged": id, "purged_base64": ops.Base64(id)})
		}
		fmt.Fprintf(e.stdout, "job %s purged\n", ops.Show(id))
		return nil
	}
	v, err := src.JobsState(ctx, e.c.limit)
	if err != nil {
		return err
	}
	if e.c.json {
		return e.printJSON(v)
	}
	fmt.Fprintf(e.stdout, "jobs: %d in flight (%d expired), %d dead\n", v.Counts.Tracked, v.Counts.Expired, v.Counts.Dead)
	if len(v.InFlight) > 0 {
		rows := make([]string, len(v.InFlight))
		for i, j := range v.InFlight {
			rows[i] = row(j.ID, j.Owner, j.Attempt, ops.MS(j.HeartbeatAgeMS), ops.MS(j.ExpiresInMS))
		}
		fmt.Fprintln(e.stdout, "\nIN FLIGHT")
		table(e.stdout, "ID\tOWNER\tATTEMPT\tHEARTBEAT AGE\tEXPIRES IN", rows)
	}
	e.more(v.InFlightMore, "jobs in flight")
	if len(v.Expired) > 0 {
		rows := make([]string, len(v.Expired))
		for i, j := range v.Expired {
			rows[i] = row(j.ID, j.Owner, j.Attempt, ops.MS(-j.ExpiresInMS))
		}
		fmt.Fprintln(e.stdout, "\nEXPIRED (awaiting the recovery scan)")
		table(e.stdout, "ID\tOWNER\tATTEMPT\tEXPIRED FOR", rows)
	}
	e.more(v.ExpiredMore, "expired jobs")
	if len(v.Dead) > 0 {
		rows := make([]string, len(v.Dead))
		for i, d := range v.Dead {
			rows[i] = row(d.ID, d.Attempt, ops.Ago(&d.DiedAt, e.now()), d.Reason)
		}
		fmt.Fprintln(e.stdout, "\nDEAD (leasehold jobs retry ID | purge ID --yes; an ID shown quoted is passed quoted)")
		table(e.stdout, "ID\tATTEMPT\tDIED\tREASON", rows)
	}
	e.more(v.DeadMore, "dead jobs")
	return nil
}

func (e *env) release(ctx context.Context, src *ops.Source, key string, force bool) error {
	g, err := src.Holder(ctx, key)
	if err != nil {
		return err
	}
	if !force {
		return usagef("--force is required to release a key held by someone else: %s is held by %s (token %d, %s left); re-run with --force to remove the grant (the holder's resource must check fencing tokens)",
			strconv.Quote(key), ops.Show(g.Holder()), g.Token, ops.MS(g.RemainingMS))
	}
	if err := src.ForceRelease(ctx, key); err != nil {
		return err
	}
	if e.c.json {
		return e.printJSON(map[string]any{"released": g})
	}
	fmt.Fprintf(e.stdout, "released %q (was held by %s, token %d)\n", key, ops.Show(g.Holder()), g.Token)
	return nil
}
