package ops

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold-go/leasehold/lock"
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

// Show returns s for a table or a page: as it is when it is valid UTF-8 of
// printable characters (spaces other than U+0020, tabs, newlines, escape
// sequences and format characters are not) and does not start with a
// double quote; otherwise quoted as strconv.Quote does, so that what is
// shown is one line, cannot forge a row or drive the terminal, and reads
// back with Unquote (the CLI takes it that way: see ParseArg).
func Show(s string) string {
	if strings.HasPrefix(s, `"`) || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// ParseArg reads a key or job ID given on a command line or in a form: an
// argument that starts with a double quote is read as Show writes it
// (strconv.Unquote: \x00, \n, \xff...), so that a key or ID with control
// characters or invalid UTF-8 can be named; any other is taken as it is.
func ParseArg(what, s string) (string, error) {
	if !strings.HasPrefix(s, `"`) {
		return s, nil
	}
	u, err := strconv.Unquote(s)
	if err != nil {
		return "", fmt.Errorf("%w: %s %.64s starts with a double quote but is not a valid quoted string (as the tables show it: \"a\\x00b\")", lock.ErrInvalidArgument, what, s)
	}
	return u, nil
}

// Base64 returns the standard base64 of s when s is not valid UTF-8 (which
// JSON cannot carry: encoding/json replaces each invalid byte by U+FFFD),
// and "" otherwise.
func Base64(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}
