package memlock

import "time"

// The table's sweep. A grant, share or writer's mark of a key that is
// never touched again would otherwise stay in the table for good once
// expired: a scheduler's tick claims (a key per tick, left to lapse) grew
// it by 10,000 entries a second at 10,000 timers. Every entry the table
// records is also appended to a list (recent); when the list has doubled
// since the last sweep, the next call that records an entry sweeps it:
// it drops from the table the entries that expired, and from the list
// those no longer recorded (released, taken over, dropped), keeping the
// live ones. The list and the table then hold at most about twice the
// entries alive at once (and sweepFloor), never the history, at O(1)
// amortized a recorded entry: each is visited by a sweep about once.

// sweepFloor is the length of the list below which it is not swept.
const sweepFloor = 1024

// recordLocked lists g (a grant, a share, or a writer's mark) for the
// sweep, and sweeps when the list has doubled since the last sweep.
func (l *Lock) recordLocked(g *grant, now time.Time) {
	t := l.table
	if len(t.recent) >= max(t.swept*2, sweepFloor) {
		l.sweepLocked(now)
	}
	t.recent = append(t.recent, g)
}

// sweepLocked drops the expired entries from the table, and from the list
// those the table no longer records.
func (l *Lock) sweepLocked(now time.Time) {
	t := l.table
	kept := t.recent[:0]
	for _, g := range t.recent {
		switch {
		case g.mark:
			until, ok := t.intents[g.key]
			if !ok || until != g.expires {
				continue // replaced or dropped
			}
			if !now.Before(until) {
				delete(t.intents, g.key)
				continue
			}
		case g.shared:
			if !now.Before(g.expires) {
				l.liveSharesLocked(g.key, now) // drops it
				continue
			}
			if !l.presentLocked(g) {
				continue
			}
		default:
			if g.dropped {
				continue
			}
			if !now.Before(g.expires) {
				g.markLost()
				l.dropLocked(g)
				continue
			}
		}
		kept = append(kept, g)
	}
	clear(t.recent[len(kept):])
	t.recent, t.swept = kept, len(kept)
}
