// Package dashboard is the leasehold web dashboard: one server-rendered
// page (html/template, embedded; no build step) with the grants,
// semaphores, leaders, timers and jobs of a backend, refreshed every two
// seconds by a small script that fetches an HTML fragment (so a
// confirmation dialog is never interrupted by a reload).
//
// It is read-only unless Options.AllowActions is set; then dead jobs have
// Retry and Purge buttons, each behind a confirm() dialog, and a purge is
// confirmed on the server too (a purge request without the confirmation
// gets a confirmation page). Actions are POSTs that must carry the
// server's random per-process token (a hidden form field) and, when the
// browser sends them, a same-origin Origin and Sec-Fetch-Site: another
// site's page cannot forge them. Every action is logged (Options.Logger).
//
// Every request is checked before anything is served. Without
// Options.Token (a loopback listener), the Host header must be 127.0.0.1,
// localhost or [::1] with the listener's port: a DNS rebinding page, whose
// requests carry its own host name, gets 421. With Options.Token (a
// listener others can reach), every request must carry the token, as the
// query parameter token= (the dashboard then sets a cookie and redirects
// to the URL without it) or in that cookie; otherwise 403.
//
// Every response has a Content-Security-Policy (scripts and styles from
// the dashboard only, no framing), X-Content-Type-Options: nosniff and
// Referrer-Policy: no-referrer.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/lock"
)

//go:embed templates/*.html static/*
var files embed.FS

// Options configure the dashboard.
type Options struct {
	// AllowActions enables retry and purge of dead jobs.
	AllowActions bool
	// Timeout bounds the backend requests of one page (default 5 s).
	Timeout time.Duration
	// Limit is how many rows each table shows (default 100, at most
	// ops.MaxLimit); a table says how many more there are.
	Limit int
	// Token, when set, is required on every request (see the package
	// doc): set it when others can reach the listener.
	Token string
	// Logger receives a record of every action (who, what, from where)
	// and of every refused request; nil for slog.Default().
	Logger *slog.Logger
}

// Dashboard is the http.Handler.
type Dashboard struct {
	src  *ops.Source
	o    Options
	log  *slog.Logger
	tmpl *template.Template
	csrf string
	mux  *http.ServeMux
}

// csp is the Content-Security-Policy of every response.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// tokenCookie carries Options.Token after the first visit.
const tokenCookie = "leasehold-dashboard-token"

// maxForm bounds the body of an action.
const maxForm = 16 << 10

// messages are the banners the page shows after an action (?done=…): fixed
// texts, never text from the request.
var messages = map[string]string{
	"retried": "The job is back in flight: the application's recovery scan will requeue it.",
	"purged":  "The job was purged.",
}

// New returns the dashboard of src.
func New(src *ops.Source, o Options) *Dashboard {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	o.Limit = min(o.Limit, ops.MaxLimit)
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	d := &Dashboard{src: src, o: o, log: o.Logger, csrf: hex.EncodeToString(b), mux: http.NewServeMux()}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.tmpl = template.Must(template.New("").Funcs(template.FuncMap{
		"ms":   ops.MS,
		"ago":  func(t *time.Time) string { return ops.Ago(t, src.Now()) },
		"agoT": func(t time.Time) string { return ops.Ago(&t, src.Now()) },
		"neg":  func(ms int64) int64 { return -ms },
		"show": ops.Show,
		"b64":  func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
		"more": func(n any, what string) template.HTML {
			var c int64
			switch n := n.(type) {
			case int:
				c = int64(n)
			case int64:
				c = n
			}
			if c <= 0 {
				return ""
			}
			return template.HTML(`<p class="empty more">… and ` + strconv.FormatInt(c, 10) + " more " + template.HTMLEscapeString(what) + "</p>")
		},
	}).ParseFS(files, "templates/*.html"))
	d.mux.HandleFunc("GET /{$}", d.page)
	d.mux.HandleFunc("GET /fragment", d.fragment)
	d.mux.Handle("GET /static/", http.FileServerFS(files))
	d.mux.HandleFunc("POST /jobs/retry", d.action)
	d.mux.HandleFunc("POST /jobs/purge", d.action)
	return d
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if d.o.Token == "" {
		if !loopbackHost(r) {
			d.refuse(r, "host not allowed")
			http.Error(w, "misdirected request: open the dashboard at http://127.0.0.1:PORT/ or http://localhost:PORT/", http.StatusMisdirectedRequest)
			return
		}
	} else if !d.authorized(w, r) {
		return
	}
	d.mux.ServeHTTP(w, r)
}

// loopbackHost reports whether r's Host is a loopback name with the port
// r came in on (a DNS rebinding page's requests carry its own host name).
func loopbackHost(r *http.Request) bool {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = r.Host, "80"
	}
	switch strings.ToLower(host) {
	case "127.0.0.1", "localhost", "::1":
	default:
		return false
	}
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	_, lport, err := net.SplitHostPort(la.String())
	return err == nil && lport == port
}

// authorized checks Options.Token (query or cookie); a request with the
// token in its query gets the cookie and a redirect to its URL without it.
func (d *Dashboard) authorized(w http.ResponseWriter, r *http.Request) bool {
	equal := func(s string) bool { return subtle.ConstantTimeCompare([]byte(s), []byte(d.o.Token)) == 1 }
	if q := r.URL.Query(); q.Has("token") {
		if !equal(q.Get("token")) {
			d.refuse(r, "wrong access token")
			http.Error(w, "wrong access token: open the URL the dashboard printed when it started", http.StatusForbidden)
			return false
		}
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: d.o.Token, Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		q.Del("token")
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
		return false
	}
	if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value) {
		return true
	}
	d.refuse(r, "no access token")
	http.Error(w, "access token required: open the URL the dashboard printed when it started (…/?token=…)", http.StatusForbidden)
	return false
}

// refuse logs a refused request.
func (d *Dashboard) refuse(r *http.Request, why string) {
	d.log.Warn("dashboard: request refused", "reason", why, "method", r.Method, "path", ops.Show(r.URL.Path),
		"host", ops.Show(r.Host), "remote", r.RemoteAddr, "user_agent", ops.Show(r.UserAgent()))
}

// semView is a semaphore with at most Limit slots listed.
type semView struct {
	ops.Semaphore
	More int // slots not listed
}

// view is what the templates render.
type view struct {
	Now          time.Time
	AllowActions bool
	CSRF         string
	Message      string

	Locks                 []ops.Grant
	LocksTotal, LocksMore int
	LocksErr              error
	Semaphores            []semView
	SemTotal, SemMore     int
	SemErr                error
	Leaders               []ops.Leader
	LeadersTotal          int
	LeadersMore           int
	LeadersErr            error
	Timers                []ops.Timer
	TimersTotal           int
	TimersMore            int
	TimersErr             error
	Jobs                  ops.Jobs
	JobsErr               error
}

// capped returns the first limit of all, how many there are and how many
// were left out.
func capped[T any](all []T, limit int) ([]T, int, int) {
	n := min(len(all), limit)
	return all[:n], len(all), len(all) - n
}

func (d *Dashboard) snapshot(ctx context.Context) view {
	ctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
	defer cancel()
	lim := d.o.Limit
	v := view{Now: d.src.Now(), AllowActions: d.o.AllowActions, CSRF: d.csrf}
	var locks []ops.Grant
	locks, v.LocksErr = d.src.Locks(ctx, "")
	v.Locks, v.LocksTotal, v.LocksMore = capped(locks, lim)
	sems, total, err := d.src.Semaphores(ctx, "", lim)
	v.SemErr, v.SemTotal, v.SemMore = err, total, total-len(sems)
	for _, s := range sems {
		sv := semView{Semaphore: s}
		sv.Slots, _, sv.More = capped(s.Slots, lim)
		v.Semaphores = append(v.Semaphores, sv)
	}
	var leaders []ops.Leader
	leaders, v.LeadersErr = d.src.Leaders(ctx, "")
	v.Leaders, v.LeadersTotal, v.LeadersMore = capped(leaders, lim)
	var ts []ops.Timer
	ts, v.TimersErr = d.src.Timers(ctx, "")
	v.Timers, v.TimersTotal, v.TimersMore = capped(ts, lim)
	v.Jobs, v.JobsErr = d.src.JobsState(ctx, lim)
	return v
}

func (d *Dashboard) render(w http.ResponseWriter, name string, v any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := d.tmpl.ExecuteTemplate(w, name, v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	v := d.snapshot(r.Context())
	v.Message = messages[r.URL.Query().Get("done")]
	d.render(w, "page.html", v)
}

func (d *Dashboard) fragment(w http.ResponseWriter, r *http.Request) {
	d.render(w, "sections", d.snapshot(r.Context()))
}

// sameOrigin checks what browsers send about a request's origin. Under
// Referrer-Policy: no-referrer a browser's form POST has Origin: null; it
// passes only with Sec-Fetch-Site: same-origin.
func sameOrigin(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o == "null" {
		return site == "same-origin"
	} else if o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// jobID reads the job an action names: id64 (base64, as the page's forms
// send it, so that any bytes survive the form) or id.
func jobID(r *http.Request) (string, error) {
	if s := r.PostFormValue("id64"); s != "" {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) == 0 {
			return "", errors.New("id64 is not base64")
		}
		return string(b), nil
	}
	if id := r.PostFormValue("id"); id != "" {
		return id, nil
	}
	return "", errors.New("no job id")
}

func (d *Dashboard) action(w http.ResponseWriter, r *http.Request) {
	what := strings.TrimPrefix(r.URL.Path, "/jobs/")
	if !d.o.AllowActions {
		d.refuse(r, "actions are disabled")
		http.Error(w, "actions are disabled: start the dashboard with --allow-actions", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(d.csrf)) != 1 {
		d.refuse(r, "cross-site request or wrong form token")
		http.Error(w, "cross-site request refused: reload the dashboard and try again", http.StatusForbidden)
		return
	}
	id, err := jobID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	log := d.log.With("action", what, "job", ops.Show(id), "remote", r.RemoteAddr,
		"user_agent", ops.Show(r.UserAgent()), "token", d.o.Token != "")
	if what == "purge" && r.PostFormValue("confirm") != "yes" {
		log.Info("dashboard: purge awaiting confirmation")
		d.render(w, "confirm.html", struct{ ID, CSRF string }{id, d.csrf})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.o.Timeout)
	defer cancel()
	done := "retried"
	if what == "retry" {
		_, err = d.src.Retry(ctx, id)
	} else {
		err = d.src.Purge(ctx, id)
		done = "purged"
	}
	if err != nil {
		log.Warn("dashboard: action failed", "error", err)
	} else {
		log.Info("dashboard: action done")
	}
	switch {
	case errors.Is(err, ops.ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, lock.ErrInvalidArgument):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, "../?done="+done, http.StatusSeeOther)
}
