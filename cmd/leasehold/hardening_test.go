package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/cli"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/semaphore"
)

// TestExitCodes: every bad argument or flag is a usage error (exit 2),
// found before anything is opened; under --json the error is a JSON object
// on stdout.
func TestExitCodes(t *testing.T) {
	mem := memURL("exit")
	for _, c := range []struct {
		args []string
		say  string
	}{
		{[]string{"release", "", "--force"}, "empty key"},
		{[]string{"release", strings.Repeat("k", 2000), "--force"}, "limit is 1024"},
		{[]string{"release", `"unterminated`, "--force"}, "not a valid quoted string"},
		{[]string{"jobs", "retry", ""}, "empty key"},
		{[]string{"jobs", "purge", "", "--yes"}, "empty key"},
		{[]string{"leader", ""}, "election name"},
		{[]string{"leader", "a\x00b"}, "control character"},
		{[]string{"semaphore", ""}, "semaphore name"},
		{[]string{"semaphore", "db", "--size", "3000000000"}, "--size"},
		{[]string{"semaphore", "db", "--size", "-5"}, "--size"},
		{[]string{"semaphore", "db", "--size", "0"}, "--size"},
		{[]string{"semaphore", "db", "--size", fmt.Sprint(semaphore.MaxSize + 1)}, "--size"},
		{[]string{"locks", "--timeout", "0s"}, "--timeout"},
		{[]string{"locks", "--timeout", "-1s"}, "--timeout"},
		{[]string{"locks", "--limit", "0"}, "--limit"},
		{[]string{"locks", "--limit", "1000000"}, "--limit"},
		{[]string{"jobs", "--lease", "-1s"}, "--lease"},
		{[]string{"locks", strings.Repeat("p", 2000)}, "prefix"},
		{[]string{"locks", "--size", "3"}, "flag provided but not defined"},
		{[]string{"dashboard", "--addr", "nonsense"}, "not host:port"},
		{[]string{"dashboard", "--addr", "127.0.0.1:"}, "not host:port"},
	} {
		args := append(c.args, "--backend", mem)
		out, errOut, code := run(t, args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, c.say) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errOut, c.say)
		}
		out, errOut, code = run(t, append(args, "--json")...)
		var e struct {
			Error, Kind string
			Exit        int
		}
		if err := json.Unmarshal([]byte(out), &e); err != nil || code != cli.ExitUsage || e.Exit != 2 || e.Kind != "usage" || !strings.Contains(e.Error, c.say) || errOut != "" {
			t.Errorf("%q --json: exit %d, stdout %q (%v), stderr %q", args, code, out, err, errOut)
		}
	}
}

// TestJobsURLProblems: a failing --jobs URL is reported as a --jobs
// problem, not a --backend one.
func TestJobsURLProblems(t *testing.T) {
	mem := memURL("jobsurl")
	_, errOut, code := run(t, "jobs", "--backend", mem, "--jobs", "redis://127.0.0.1:1", "--timeout", "2s")
	if code != cli.ExitFailed || !strings.Contains(errOut, "--jobs right (redis://127.0.0.1:1)") || strings.Contains(errOut, "--backend right") {
		t.Errorf("unreachable --jobs: exit %d, %q", code, errOut)
	}
	_, errOut, code = run(t, "jobs", "--backend", mem, "--jobs", "redis://127.0.0.1:badport")
	if code != cli.ExitUsage || !strings.Contains(errOut, "jobs URL") {
		t.Errorf("bad --jobs: exit %d, %q", code, errOut)
	}
	_, errOut, code = run(t, "jobs", "retry", "x", "--backend", mem, "--jobs", "ftp://x")
	if code != cli.ExitUsage || !strings.Contains(errOut, "jobs URL scheme") {
		t.Errorf("bad --jobs scheme: exit %d, %q", code, errOut)
	}
}

const topSecret = "TopSecret-4c2e"

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecretsNeverPrinted: over every URL form, as --backend and as
// --jobs, in tables and in JSON, no output (stdout, stderr) shows the
// password; nor do the dashboard's banner, log and pages.
func TestSecretsNeverPrinted(t *testing.T) {
	forms := []string{
		"redis://:" + topSecret + "@127.0.0.1:badport/",
		"redis://user:" + topSecret + "@127.0.0.1:1/",
		"rediss://:" + topSecret + "@[::1",
		"redis+cluster://:" + topSecret + "@127.0.0.1:1",
		"redis+cluster://:" + topSecret + "@127.0.0.1:1/0",
		"postgres://u:" + topSecret + "@127.0.0.1:1/db",
		"postgres://u:" + topSecret + "@127.0.0.1:badport/db",
		"postgres://u@127.0.0.1:1/db?password=" + topSecret,
		"postgresql://u@127.0.0.1:1/db?sslmode=nope&password=" + topSecret,
		"host=127.0.0.1 port=1 user=u password=" + topSecret,
		"host=127.0.0.1 password='" + topSecret + "' user=u",
		"etcd://root:" + topSecret + "@127.0.0.1:1/x",
		"gopher://u:" + topSecret + "@x",
	}
	mem := memURL("secrets")
	for _, u := range forms {
		for _, args := range [][]string{
			{"locks", "--backend", u},
			{"locks", "--backend", u, "--json"},
			{"jobs", "--backend", u},
			{"jobs", "--backend", mem, "--jobs", u},
			{"jobs", "--backend", mem, "--jobs", u, "--json"},
			{"jobs", "retry", "x", "--backend", mem, "--jobs", u},
		} {
			out, errOut, code := run(t, append(args, "--timeout", "2s")...)
			if code == cli.ExitOK {
				t.Errorf("%s: exit 0", backend.Redact(u))
			}
			if strings.Contains(out+errOut, topSecret) {
				t.Errorf("%v prints the password:\n%s%s", redactArgs(args), out, errOut)
			}
		}
	}
	// The dashboard on a backend whose connection fails at first use, with
	// the password in the query, and a --jobs of the same kind.
	u := "postgres://u@127.0.0.1:1/db?password=" + topSecret
	base, stderr, stop := startDashboard(t, "--backend", u, "--jobs", u, "--timeout", "2s", "--allow-actions")
	var pages strings.Builder
	for _, path := range []string{"", "fragment"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pages.Write(b)
	}
	resp, err := http.PostForm(base+"jobs/retry", map[string][]string{"id": {"x"}, "csrf": {"bad"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	stop()
	if !strings.Contains(pages.String(), "Locks") {
		t.Fatalf("no page:\n%s", pages.String())
	}
	if strings.Contains(stderr.String()+pages.String(), topSecret) {
		t.Fatalf("the dashboard shows the password:\n%s\n%s", stderr.String(), pages.String())
	}
}

func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, topSecret, "SECRET")
	}
	return out
}

// TestTablesQuote: keys, owners and reasons with control characters are
// quoted in tables (no escape sequence reaches the terminal, a newline
// forges no row); --json keeps the text, with the bytes of a key or ID that
// is not UTF-8 in *_base64; a dead job whose ID has a NUL or an invalid
// byte is retried and purged by its quoted form.
func TestTablesQuote(t *testing.T) {
	url := memURL("quote")
	ctx := t.Context()
	l, _, err := backend.Open(ctx, url, backend.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		t.Fatal(err)
	}
	evil := "evil\x1b[31m\nforged\trow"
	must(l.TryAcquire(ctx, evil, time.Minute))
	must(l.TryAcquire(ctx, "bad\xffutf8", time.Minute))
	out, _, code := run(t, "locks", "--backend", url)
	if code != cli.ExitOK || hasByte(out, 0x1b, 0xff) || strings.Count(out, "\n") != 3 ||
		!strings.Contains(out, `"evil\x1b[31m\nforged\trow"`) || !strings.Contains(out, `"bad\xffutf8"`) {
		t.Fatalf("locks table:\n%s", out)
	}
	var gs []ops.Grant
	decodeJSON(t, &gs, "locks", "--backend", url)
	for _, g := range gs {
		raw, _ := base64.StdEncoding.DecodeString(g.KeyBase64)
		if g.Key != evil && string(raw) != "bad\xffutf8" {
			t.Fatalf("JSON grant %+v", g)
		}
	}
	reg, _, err := ops.OpenRegistry(ctx, url, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"job\x00one", "job\xfftwo"} {
		j := must(reg.Track(ctx, jobs.Job{ID: id, Owner: "w"}, time.Minute))
		if err := reg.Bury(ctx, j.Ref(), "reason\x1b[2J"); err != nil {
			t.Fatal(err)
		}
	}
	out, _, _ = run(t, "jobs", "--backend", url)
	if hasByte(out, 0x1b, 0, 0xff) || !strings.Contains(out, `"job\x00one"`) || !strings.Contains(out, `"reason\x1b[2J"`) {
		t.Fatalf("jobs table:\n%q", out)
	}
	if out, errOut, code := run(t, "jobs", "retry", `"job\x00one"`, "--backend", url); code != cli.ExitOK {
		t.Fatalf("retry by the quoted ID: exit %d, %s%s", code, out, errOut)
	}
	if out, errOut, code := run(t, "jobs", "purge", `"job\xfftwo"`, "--yes", "--backend", url); code != cli.ExitOK || hasByte(out, 0xff) {
		t.Fatalf("purge by the quoted ID: exit %d, %q %s", code, out, errOut)
	}
	if c := must(reg.(jobs.Inspector).Counts(ctx)); c.Dead != 0 {
		t.Fatalf("dead jobs left: %+v", c)
	}
	_, errOut, code := run(t, "release", `"evil\x1b[31m\nforged\trow"`, "--backend", url)
	if code != cli.ExitUsage || strings.Contains(errOut, "\x1b") || !strings.Contains(errOut, "held by host-a") {
		t.Fatalf("release of the quoted key without --force: exit %d, %q", code, errOut)
	}
	if _, errOut, code := run(t, "release", `"evil\x1b[31m\nforged\trow"`, "--force", "--backend", url); code != cli.ExitOK {
		t.Fatalf("release --force of the quoted key: exit %d, %s", code, errOut)
	}
}

// TestSemaphoreUntrustedSizes: sizes and slot numbers any client can
// write are not used beyond semaphore.MaxSize (a size marker of 3e9 made
// the CLI run out of memory).
func TestSemaphoreUntrustedSizes(t *testing.T) {
	url := memURL("bigsem")
	ctx := t.Context()
	l := openMem(t, url)
	must(l.TryAcquire(ctx, fmt.Sprintf("sem/{big}/size/%d", semaphore.MaxSize+1), time.Minute))
	must(l.TryAcquire(ctx, "sem/{big}/slot/99999999", time.Minute))
	must(l.TryAcquire(ctx, "sem/{big}/size/2", time.Minute))
	must(l.TryAcquire(ctx, semaphore.SlotKey("big", 1), time.Minute))
	var s ops.Semaphore
	decodeJSON(t, &s, "semaphore", "big", "--backend", url)
	if s.Size != 2 || len(s.Slots) != 2 || s.Held != 1 || s.Ignored != 2 {
		t.Fatalf("semaphore %+v", s)
	}
	out, _, code := run(t, "semaphore", "big", "--backend", url)
	if code != cli.ExitOK || !strings.Contains(out, "2 size or slot keys out of range") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestLocksTableCapped: the table shows --limit rows and says how many
// more there are.
func TestLocksTableCapped(t *testing.T) {
	url := memURL("capped")
	ctx := t.Context()
	l := openMem(t, url)
	for i := range 25 {
		must(l.TryAcquire(ctx, fmt.Sprintf("k/%02d", i), time.Minute))
	}
	out, _, _ := run(t, "locks", "--backend", url, "--limit", "10")
	sc := bufio.NewScanner(strings.NewReader(out))
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "k/") {
			n++
		}
	}
	if n != 10 || !strings.Contains(out, "and 15 more grants") {
		t.Fatalf("%d rows:\n%s", n, out)
	}
}

// hasByte reports whether s has one of bs.
func hasByte(s string, bs ...byte) bool {
	for _, b := range bs {
		if strings.IndexByte(s, b) >= 0 {
			return true
		}
	}
	return false
}

func openMem(t *testing.T, url string) lock.Lock {
	l, _, err := backend.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startDashboard runs 'leasehold dashboard --addr 127.0.0.1:0 args...'
// until stop, and returns the URL it printed.
func startDashboard(t *testing.T, args ...string) (url string, stderr *syncBuffer, stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	stderr = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, append([]string{"dashboard", "--addr", "127.0.0.1:0"}, args...), io.Discard, stderr)
	}()
	printed := regexp.MustCompile(`http://127\.0\.0\.1:\d+/\S*`)
	for url == "" {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("the dashboard ended: exit %d, %s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
			url = printed.FindString(stderr.String())
		}
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return url, stderr, stop
}

// TestDashboardAccessToken: with --allow-remote the dashboard prints a
// URL with a per-start token; without it a request is refused, with it the
// browser gets a cookie and the page.
func TestDashboardAccessToken(t *testing.T) {
	u, _, _ := startDashboard(t, "--allow-remote", "--backend", memURL("token"))
	base, token, ok := strings.Cut(u, "?token=")
	if !ok || len(token) < 20 {
		t.Fatalf("printed URL %q has no token", u)
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("without the token: %d, want 403", resp.StatusCode)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	if resp, err = c.Get(u); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.RawQuery != "" {
		t.Fatalf("with the token: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	if resp, err = c.Get(base + "fragment"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with the cookie: %d", resp.StatusCode)
	}
}

// TestErrorsQuoteControlCharacters: an error message that carries a
// control character (from an argument or from the backend) reaches the
// terminal quoted.
func TestErrorsQuoteControlCharacters(t *testing.T) {
	for _, args := range [][]string{
		{"locks", "--\x1b[2J"},
		{"\x1b]0;owned\x07"},
		{"leader", "no-such\x1b[31m", "--backend", memURL("ctl")},
	} {
		_, errOut, code := run(t, args...)
		if code != cli.ExitUsage || hasByte(errOut, 0x1b, 0x07) {
			t.Errorf("%q: exit %d, %q", args, code, errOut)
		}
	}
}
