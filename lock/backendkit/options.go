package backendkit

import (
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"

	"github.com/leasehold-go/leasehold/lock"
)

// Apply applies a package's options to its settings s, in order, and
// returns the first refusal as an error from Invalid(pkg, …): every
// package of leasehold declares its own option type, a func(*S) error, and
// its constructor calls Apply. A nil option is refused.
func Apply[S any, O ~func(*S) error](pkg string, s *S, opts []O) error {
	for i, o := range opts {
		if o == nil {
			return Invalid(pkg, "option %d is nil", i)
		}
		if err := o(s); err != nil {
			return Invalid(pkg, "%w", err)
		}
	}
	return nil
}

// Resolve checks c's Owner (CheckOwner) and fills c's zero fields
// with their defaults: owner (or lock.NewOwner when owner is empty too),
// slog.Default and the global OpenTelemetry providers. A constructor calls
// it once and keeps the result; a tool built on a Lock passes
// OwnerOf(l, "") as owner, so that it reports the backend's identity
// unless it was given one.
func Resolve(pkg string, c lock.Common, owner string) (lock.Common, error) {
	switch {
	case c.Owner != "":
	case owner != "":
		c.Owner = owner
	default:
		c.Owner = lock.NewOwner()
	}
	// Checked wherever it came from: a Lock's owner (a third-party
	// backend's) ends up in records and log lines too.
	if err := CheckOwner("owner", c.Owner); err != nil {
		return c, Invalid(pkg, "%w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c, nil
}

// Invalid returns an input error of package pkg: its message reads
// "pkg: invalid argument: " and the formatted detail, so that the caller
// can tell which package refused what, and it matches
// lock.ErrInvalidArgument with errors.Is, as well as any error that format
// wraps with %w (lock.ErrInvalidTTL, for one).
func Invalid(pkg, format string, args ...any) error {
	return &invalidError{pkg: pkg, err: fmt.Errorf(format, args...)}
}

type invalidError struct {
	pkg string
	err error
}

func (e *invalidError) Error() string {
	msg, kind := e.err.Error(), "invalid argument"
	// The detail may hold an input error of lock's ("lock: invalid ttl:
	// …"): say its kind once, in this package's name.
	for _, s := range []error{lock.ErrInvalidKey, lock.ErrInvalidTTL, lock.ErrInvalidArgument} {
		if i := strings.Index(msg, s.Error()+": "); i >= 0 {
			kind = strings.TrimPrefix(s.Error(), "lock: ")
			msg = msg[:i] + msg[i+len(s.Error())+2:]
			break
		}
	}
	return e.pkg + ": " + kind + ": " + msg
}

func (e *invalidError) Unwrap() []error { return []error{lock.ErrInvalidArgument, e.err} }

// ResolveOn is Resolve for a tool that works through l's grants (leader,
// semaphore): the owner defaults to l's (OwnerOf), and an Owner in c
// that differs from the one l stores with its grants is refused, since
// the tool could only report it, never make it true.
func ResolveOn(pkg string, c lock.Common, l lock.Lock) (lock.Common, error) {
	owner := OwnerOf(l, "")
	if c.Owner != "" && owner != "" && c.Owner != owner {
		return c, Invalid(pkg, "owner %q is not the Lock's %q: a grant's owner is set on its backend", c.Owner, owner)
	}
	return Resolve(pkg, c, owner)
}
