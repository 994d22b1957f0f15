package dashboard_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/dashboard"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/semaphore"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

var memN atomic.Int64

// memSource opens a fresh in-process backend with a dead job of each id.
func memSource(t *testing.T, dead ...string) *ops.Source {
	t.Helper()
	ctx := t.Context()
	src, err := ops.Open(ctx, ops.Config{Backend: fmt.Sprintf("mem://dash-%s-%d", t.Name(), memN.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	for _, id := range dead {
		j, err := src.Jobs.Track(ctx, jobs.Job{ID: id, Owner: "w"}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Jobs.Bury(ctx, j.Ref(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

type response struct {
	code   int
	body   string
	header http.Header
}

// do sends a request to h served on a loopback listener; hdr may set
// "Host".
func do(t *testing.T, h http.Handler, method, path string, form url.Values, hdr map[string]string) response {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		if k == "Host" {
			r.Host = strings.ReplaceAll(v, "PORT", srv.URL[strings.LastIndex(srv.URL, ":")+1:])
			continue
		}
		r.Header.Set(k, strings.ReplaceAll(v, "PORT", srv.URL[strings.LastIndex(srv.URL, ":")+1:]))
	}
	resp, err := noRedirect.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, string(b), resp.Header}
}

func get(t *testing.T, h http.Handler, path string, hdr map[string]string) response {
	t.Helper()
	return do(t, h, "GET", path, nil, hdr)
}

// csrfOf returns the form token of a page.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	i := strings.Index(page, `name="csrf" value="`)
	if i < 0 {
		t.Fatalf("no token in the page:\n%s", page)
	}
	tok := page[i+len(`name="csrf" value="`):]
	return tok[:strings.Index(tok, `"`)]
}

func deadCount(t *testing.T, src *ops.Source) int64 {
	c, err := src.Jobs.(jobs.Inspector).Counts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return c.Dead
}

// TestDNSRebinding: a page of rebind.example (resolved to 127.0.0.1) gets
// neither the page, nor its token, nor an action; the loopback names with
// the listener's port do.
func TestDNSRebinding(t *testing.T) {
	src := memSource(t, "d")
	d := dashboard.New(src, dashboard.Options{AllowActions: true})
	for _, host := range []string{"rebind.example:PORT", "127.0.0.1:1", "localhost", "127.0.0.2:PORT", "evil.localhost:PORT"} {
		for _, path := range []string{"/", "/fragment", "/static/app.js"} {
			r := get(t, d, path, map[string]string{"Host": host})
			if r.code != http.StatusMisdirectedRequest || strings.Contains(r.body, `name="csrf"`) {
				t.Errorf("GET %s with Host %s: %d, want 421\n%.300s", path, host, r.code, r.body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:PORT", "localhost:PORT", "LocalHost:PORT", "[::1]:PORT"} {
		if r := get(t, d, "/", map[string]string{"Host": host}); r.code != http.StatusOK {
			t.Errorf("GET / with Host %s: %d, want 200", host, r.code)
		}
	}
	token := csrfOf(t, get(t, d, "/", nil).body)
	form := url.Values{"id": {"d"}, "csrf": {token}, "confirm": {"yes"}}
	r := do(t, d, "POST", "/jobs/purge", form, map[string]string{"Host": "rebind.example:PORT", "Origin": "http://rebind.example:PORT", "Sec-Fetch-Site": "same-origin"})
	if r.code != http.StatusMisdirectedRequest || deadCount(t, src) != 1 {
		t.Fatalf("purge through a rebound host name: %d, dead %d", r.code, deadCount(t, src))
	}
}

// TestAccessToken: with a token (--allow-remote) every request needs it;
// ?token= sets a cookie and redirects to the URL without it; the cookie
// then suffices, whatever the Host.
func TestAccessToken(t *testing.T) {
	src := memSource(t)
	d := dashboard.New(src, dashboard.Options{Token: "s3cret-token"})
	for _, path := range []string{"/", "/fragment", "/static/app.js", "/?token=wrong"} {
		if r := get(t, d, path, map[string]string{"Host": "dash.example:PORT"}); r.code != http.StatusForbidden {
			t.Errorf("GET %s without the token: %d, want 403", path, r.code)
		}
	}
	r := get(t, d, "/?token=s3cret-token", nil)
	if r.code != http.StatusSeeOther || r.header.Get("Location") != "/" {
		t.Fatalf("GET /?token=…: %d, Location %q", r.code, r.header.Get("Location"))
	}
	cookie := r.header.Get("Set-Cookie")
	if !strings.Contains(cookie, "s3cret-token") || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("cookie %q", cookie)
	}
	name := cookie[:strings.Index(cookie, "=")]
	for _, path := range []string{"/", "/fragment", "/static/app.js"} {
		if r := get(t, d, path, map[string]string{"Host": "dash.example:PORT", "Cookie": name + "=s3cret-token"}); r.code != http.StatusOK {
			t.Errorf("GET %s with the cookie: %d, want 200", path, r.code)
		}
	}
	if r := get(t, d, "/", map[string]string{"Cookie": name + "=other"}); r.code != http.StatusForbidden {
		t.Errorf("GET / with a wrong cookie: %d, want 403", r.code)
	}
}

// TestPurgeConfirmedOnServer: a purge without the confirmation gets a
// confirmation page and deletes nothing; its form purges.
func TestPurgeConfirmedOnServer(t *testing.T) {
	src := memSource(t, "d")
	d := dashboard.New(src, dashboard.Options{AllowActions: true})
	token := csrfOf(t, get(t, d, "/", nil).body)
	r := do(t, d, "POST", "/jobs/purge", url.Values{"id": {"d"}, "csrf": {token}}, nil)
	if r.code != http.StatusOK || !strings.Contains(r.body, `id="confirm"`) || deadCount(t, src) != 1 {
		t.Fatalf("unconfirmed purge: %d, dead %d\n%s", r.code, deadCount(t, src), r.body)
	}
	if !strings.Contains(r.body, `name="confirm" value="yes"`) {
		t.Fatalf("the confirmation page has no confirming form:\n%s", r.body)
	}
	r = do(t, d, "POST", "/jobs/purge", url.Values{"id": {"d"}, "csrf": {token}, "confirm": {"yes"}}, nil)
	if r.code != http.StatusSeeOther || deadCount(t, src) != 0 {
		t.Fatalf("confirmed purge: %d, dead %d", r.code, deadCount(t, src))
	}
}

// TestNoFreeTextBanner: the page shows no text from its URL.
func TestNoFreeTextBanner(t *testing.T) {
	d := dashboard.New(memSource(t), dashboard.Options{})
	r := get(t, d, "/?msg="+url.QueryEscape("Your session expired: log in at evil.example")+"&done=x", nil)
	if r.code != http.StatusOK || strings.Contains(r.body, "evil.example") || strings.Contains(r.body, `id="msg"`) {
		t.Fatalf("%d\n%s", r.code, r.body)
	}
	if r := get(t, d, "/?done=purged", nil); !strings.Contains(r.body, "The job was purged.") {
		t.Fatalf("the fixed message is missing:\n%s", r.body)
	}
}

// TestSecurityHeaders: every response, refusals and errors included,
// carries the CSP, nosniff and the referrer policy.
func TestSecurityHeaders(t *testing.T) {
	d := dashboard.New(memSource(t), dashboard.Options{})
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
	}{
		{"GET", "/", nil}, {"GET", "/fragment", nil}, {"GET", "/static/app.js", nil}, {"GET", "/static/style.css", nil},
		{"GET", "/nope", nil}, {"POST", "/jobs/retry", nil}, {"GET", "/", map[string]string{"Host": "rebind.example:PORT"}},
	} {
		var form url.Values
		if c.method == "POST" {
			form = url.Values{}
		}
		h := do(t, d, c.method, c.path, form, c.hdr).header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s %v: headers %v", c.method, c.path, c.hdr, h)
		}
	}
	if page := get(t, d, "/", nil).body; strings.Contains(page, "<script>") || strings.Contains(page, "<style>") || strings.Contains(page, " style=") || strings.Contains(page, " onsubmit=") {
		t.Fatalf("the page has inline script or style, which the CSP forbids:\n%s", page)
	}
}

// TestTextShownQuoted: keys, owners, IDs and reasons with control
// characters are shown quoted (an escape sequence or a newline is
// visible), and a dead job whose ID has a NUL can be retried and purged
// through the page's forms.
func TestTextShownQuoted(t *testing.T) {
	nul := "job\x00one"
	src := memSource(t, nul, "job\xfftwo")
	ctx := t.Context()
	if _, err := src.Lock.TryAcquire(ctx, "evil\x1b[31m\nforged\trow", time.Minute); err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(src, dashboard.Options{AllowActions: true})
	page := get(t, d, "/", nil).body
	for _, want := range []string{`&#34;evil\x1b[31m\nforged\trow&#34;`, `&#34;job\x00one&#34;`, `&#34;job\xfftwo&#34;`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not show %s:\n%s", want, page)
		}
	}
	if strings.Contains(page, "\x1b") || strings.Contains(page, "\x00") {
		t.Error("the page carries a raw control character")
	}
	token := csrfOf(t, page)
	// The forms as the page has them (id64 fields).
	var id64s []string
	for rest := page; ; {
		i := strings.Index(rest, `name="id64" value="`)
		if i < 0 {
			break
		}
		rest = rest[i+len(`name="id64" value="`):]
		id64s = append(id64s, rest[:strings.Index(rest, `"`)])
	}
	if len(id64s) != 4 {
		t.Fatalf("%d id64 fields, want 4 (retry and purge of two jobs)", len(id64s))
	}
	for _, v := range id64s[:1] {
		if r := do(t, d, "POST", "/jobs/retry", url.Values{"id64": {v}, "csrf": {token}}, nil); r.code != http.StatusSeeOther {
			t.Fatalf("retry: %d %s", r.code, r.body)
		}
	}
	if r := do(t, d, "POST", "/jobs/purge", url.Values{"id64": {id64s[3]}, "csrf": {token}, "confirm": {"yes"}}, nil); r.code != http.StatusSeeOther {
		t.Fatalf("purge: %d %s", r.code, r.body)
	}
	if n := deadCount(t, src); n != 0 {
		t.Fatalf("%d dead jobs left", n)
	}
}

// TestActionsLogged: an action is logged with what, which job and from
// where; a refused request too.
func TestActionsLogged(t *testing.T) {
	src := memSource(t, "d")
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, nil))
	d := dashboard.New(src, dashboard.Options{AllowActions: true, Logger: log})
	token := csrfOf(t, get(t, d, "/", nil).body)
	do(t, d, "POST", "/jobs/retry", url.Values{"id": {"d"}, "csrf": {token}}, nil)
	get(t, d, "/", map[string]string{"Host": "rebind.example:PORT"})
	mu.Lock()
	defer mu.Unlock()
	var recs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 2 || recs[0]["action"] != "retry" || recs[0]["job"] != "d" || !strings.HasPrefix(fmt.Sprint(recs[0]["remote"]), "127.0.0.1:") ||
		recs[1]["reason"] != "host not allowed" || recs[1]["host"] == nil {
		t.Fatalf("records %v", recs)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestTablesCapped: a table shows at most Limit rows and says how many it
// left out; a semaphore size written by any client beyond
// semaphore.MaxSize does not make the page allocate by it.
func TestTablesCapped(t *testing.T) {
	src := memSource(t)
	ctx := t.Context()
	for i := range 30 {
		if _, err := src.Lock.TryAcquire(ctx, fmt.Sprintf("k/%03d", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Lock.TryAcquire(ctx, fmt.Sprintf("sem/{big}/size/%d", semaphore.MaxSize+1), time.Minute); err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(src, dashboard.Options{Limit: 10})
	page := get(t, d, "/", nil).body
	if strings.Contains(page, "k/010") || !strings.Contains(page, "k/009") || !strings.Contains(page, "… and 21 more grants") {
		t.Fatalf("the locks table is not capped at 10:\n%s", page)
	}
	if strings.Count(page, `class="free"`) > 10 {
		t.Fatalf("%d free slots listed", strings.Count(page, `class="free"`))
	}
}

// TestBadJobIDIsBadRequest: an action on an ID no registry accepts is the
// client's error (400), not the backend's (502).
func TestBadJobIDIsBadRequest(t *testing.T) {
	d := dashboard.New(memSource(t, "d"), dashboard.Options{AllowActions: true})
	token := csrfOf(t, get(t, d, "/", nil).body)
	r := do(t, d, "POST", "/jobs/retry", url.Values{"id": {strings.Repeat("x", 2000)}, "csrf": {token}}, nil)
	if r.code != http.StatusBadRequest {
		t.Fatalf("retry of a 2000-byte ID: %d %s, want 400", r.code, r.body)
	}
}

// TestManySemaphoresBounded: the page lays out at most Limit semaphores,
// and says how many more there are.
func TestManySemaphoresBounded(t *testing.T) {
	src := memSource(t)
	for i := range 15 {
		if _, err := src.Lock.TryAcquire(t.Context(), fmt.Sprintf("sem/{s%02d}/size/%d", i, semaphore.MaxSize), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	page := get(t, dashboard.New(src, dashboard.Options{Limit: 10}), "/", nil).body
	if strings.Contains(page, ">s10<") || !strings.Contains(page, ">s09<") || !strings.Contains(page, "… and 5 more semaphores") {
		t.Fatalf("semaphores not capped at 10:\n%.3000s", page)
	}
}

// TestJobsWithoutTheView: on a registry that is no jobs.Inspector (the
// operator's view is optional) the page shows, in its jobs section, that
// the registry cannot list its jobs, and the rest of the page as usual.
func TestJobsWithoutTheView(t *testing.T) {
	src := memSource(t)
	src.Jobs = struct{ jobs.Registry }{src.Jobs} // the view hidden
	r := get(t, dashboard.New(src, dashboard.Options{}), "/", nil)
	if r.code != http.StatusOK || !strings.Contains(r.body, "cannot list its jobs") || !strings.Contains(r.body, "<h2>Jobs</h2>") {
		t.Fatalf("%d\n%s", r.code, r.body)
	}
}
