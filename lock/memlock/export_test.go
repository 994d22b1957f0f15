package memlock

import "time"

// Entries is how many entries l's table records (grants, shares and
// writers' marks, expired or not) and how many its sweep's list holds.
func Entries(l *Lock) (table, listed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	table = len(l.grants) + len(l.intents)
	for _, s := range l.shares {
		table += len(s)
	}
	return table, len(l.recent)
}

// SweepFloor is sweepFloor.
const SweepFloor = sweepFloor

// Sweep sweeps l's table now.
func Sweep(l *Lock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(time.Now())
}
