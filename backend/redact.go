package backend

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// Redact returns rawURL in a form safe to print: a URL's password is
// replaced by "xxxxx" (url.URL.Redacted), query parameters that may carry a
// secret (password, sslpassword, ...) are replaced by "xxxxx", a URL that
// does not parse is shown by its scheme only, and a string without a scheme
// (a keyword connection string such as "host=… password=…") is not shown
// at all.
func Redact(rawURL string) string {
	if rawURL == "" {
		return `""`
	}
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "(a connection string without a scheme, not shown)"
	}
	if !validScheme(scheme) {
		return "(an unparsable URL, not shown)"
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return scheme + "://(unparsable, not shown)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if secretParam(k) {
				q[k] = []string{"xxxxx"}
			}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.Redacted()
}

// validScheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-', '.').
func validScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// secretParam reports whether a query parameter may carry a secret.
func secretParam(k string) bool {
	k = strings.ToLower(k)
	return strings.Contains(k, "pass") || strings.Contains(k, "secret") || strings.Contains(k, "token") || k == "pwd"
}

// keywordPassword matches the values of password-like keywords of a
// keyword connection string (quoted or not).
var keywordPassword = regexp.MustCompile(`(?i)[a-z_]*pass[a-z_]*\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// secrets returns the secrets rawURL carries: its userinfo password, the
// values of its secret query parameters, the values of password keywords,
// raw and decoded.
func secrets(rawURL string) []string {
	var out []string
	add := func(s string) {
		s = strings.Trim(s, "'")
		if s != "" {
			out = append(out, s)
			if d, err := url.PathUnescape(s); err == nil && d != s {
				out = append(out, d)
			}
		}
	}
	if u, err := url.Parse(rawURL); err == nil {
		if p, ok := u.User.Password(); ok {
			add(p)
		}
		for k, vs := range u.Query() {
			if secretParam(k) {
				for _, v := range vs {
					add(v)
				}
			}
		}
	}
	// Whatever did or did not parse: the text between "://…:" and the
	// last '@', and keyword values.
	if _, rest, ok := strings.Cut(rawURL, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				add(pw)
			}
		}
		if _, q, ok := strings.Cut(rest, "?"); ok {
			for kv := range strings.SplitSeq(q, "&") {
				if k, v, ok := strings.Cut(kv, "="); ok && secretParam(k) {
					add(v)
				}
			}
		}
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(rawURL, -1) {
		add(m[1])
	}
	return out
}

// RedactError returns err with every secret of rawURL (see Redact) and
// rawURL itself removed from its message; errors.Is and errors.As still
// see err's chain. Errors of the URL parser, which quote the whole URL,
// are cut down to their cause.
func RedactError(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) && ue.URL != "" {
		msg = strings.ReplaceAll(msg, ue.URL, Redact(ue.URL))
	}
	if rawURL != "" {
		msg = strings.ReplaceAll(msg, rawURL, Redact(rawURL))
	}
	for _, s := range secrets(rawURL) {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose message had secrets removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
