package backendkit

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/leasehold-go/leasehold/lock"
)

// CheckName is the one rule for the names the tools turn into keys (what
// says which: "semaphore name", "election name", "timer name"): 1 to
// lock.MaxNameLen bytes of valid UTF-8, without control characters and without
// braces (they would change a key's Redis Cluster hash tag). The error
// matches lock.ErrInvalidArgument and names what and the name, quoted.
func CheckName(what, name string) error {
	if strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: %s %.64q contains a brace", lock.ErrInvalidArgument, what, name)
	}
	return checkText(what, name, lock.MaxNameLen)
}

// CheckOwner is the rule for owner identities (Common.Owner, a registry's
// worker identity): 1 to lock.MaxKeyLen bytes of valid UTF-8 without control
// characters, so that an owner never corrupts a record it is stored in
// or the line it is printed on.
func CheckOwner(what, owner string) error { return checkText(what, owner, lock.MaxKeyLen) }

// checkText requires 1 to max bytes of valid UTF-8 without control
// characters.
func checkText(what, s string, max int) error {
	bad := ""
	switch {
	case s == "":
		bad = "is empty"
	case len(s) > max:
		bad = fmt.Sprintf("is %d bytes, the limit is %d", len(s), max)
	case !utf8.ValidString(s):
		bad = "is not valid UTF-8"
	case strings.ContainsFunc(s, unicode.IsControl):
		bad = "contains a control character"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s %.64q %s", lock.ErrInvalidArgument, what, s, bad)
}

// OwnerOf is the one rule by which the tools (leader, timers, jobs) name
// the process they run in: l's owner identity when l is Owned and reports
// one, and fallback otherwise (the tool's configured owner, Common.Owner or
// lock.NewOwner).
func OwnerOf(l lock.Lock, fallback string) string {
	if o, ok := l.(lock.Owned); ok {
		if owner := o.Owner(); owner != "" {
			return owner
		}
	}
	return fallback
}
