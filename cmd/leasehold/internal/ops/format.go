package ops

import (
	"strconv"
	"time"
)

// Dur formats a duration for people: 850ms, 12.3s, 4m12s, 3h05m.
func Dur(d time.Duration) string {
	if d < 0 {
		return "-" + Dur(-d)
	}
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Round(10*time.Millisecond).Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	d = d.Round(time.Minute)
	return strconv.Itoa(int(d/time.Hour)) + "h" + twoDigits(int(d%time.Hour/time.Minute)) + "m"
}

func twoDigits(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// MS formats milliseconds as Dur does.
func MS(ms int64) string { return Dur(time.Duration(ms) * time.Millisecond) }

// Ago formats the age of t at now ("-" for a nil or zero time).
func Ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return Dur(now.Sub(*t)) + " ago"
}
