// Package dashboard is the leasehold web dashboard: one server-rendered
// page (html/template, embedded; no build step) with the grants,
// semaphores, leaders, timers and jobs of a backend, refreshed every two
// seconds by a small inline script that fetches an HTML fragment (so a
// confirmation dialog is never interrupted by a reload).
//
// It is read-only unless Options.AllowActions is set; then dead jobs have
// Retry and Purge buttons, each behind a confirm() dialog. Actions are
// POSTs that must carry the server's random per-process token (a hidden
// form field) and, when the browser sends them, a same-origin Origin and
// Sec-Fetch-Site: another site's page cannot forge them.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
)

//go:embed templates/*.html
var files embed.FS

// Options configure the dashboard.
type Options struct {
	// AllowActions enables retry and purge of dead jobs.
	AllowActions bool
	// Timeout bounds the backend requests of one page (default 5 s).
	Timeout time.Duration
	// Limit is how many jobs of each kind are shown (default 100).
	Limit int
}

// Dashboard is the http.Handler.
type Dashboard struct {
	src  *ops.Source
	o    Options
	tmpl *template.Template
	csrf string
	mux  *http.ServeMux
}

// New returns the dashboard of src.
func New(src *ops.Source, o Options) *Dashboard {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	d := &Dashboard{src: src, o: o, csrf: hex.EncodeToString(b), mux: http.NewServeMux()}
	d.tmpl = template.Must(template.New("").Funcs(template.FuncMap{
		"ms":   ops.MS,
		"ago":  func(t *time.Time) string { return ops.Ago(t, src.Now()) },
		"agoT": func(t time.Time) string { return ops.Ago(&t, src.Now()) },
		"neg":  func(ms int64) int64 { return -ms },
	}).ParseFS(files, "templates/*.html"))
	d.mux.HandleFunc("GET /{$}", d.page)
	d.mux.HandleFunc("GET /fragment", d.fragment)
	d.mux.HandleFunc("POST /jobs/retry", d.action)
	d.mux.HandleFunc("POST /jobs/purge", d.action)
	return d
}

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Cache-Control", "no-store")
	d.mux.ServeHTTP(w, r)
}

// view is what the templates render.
type view struct {
	Now          time.Time
	AllowActions bool
	CSRF         string
	Message      string

	Locks      []ops.Grant
	LocksErr   error
	Semaphores []ops.Semaphore
	SemErr     error
	Leaders    []ops.Leader
	LeadersErr error
	Timers     []ops.Timer
	TimersErr  error
	Jobs       ops.Jobs
	JobsErr    error
}

func (d *Dashboard) snapshot(ctx context.Context) view {
	ctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
	defer cancel()
	v := view{Now: d.src.Now(), AllowActions: d.o.AllowActions, CSRF: d.csrf}
	v.Locks, v.LocksErr = d.src.Locks(ctx, "")
	v.Semaphores, v.SemErr = d.src.Semaphores(ctx, "")
	v.Leaders, v.LeadersErr = d.src.Leaders(ctx, "")
	v.Timers, v.TimersErr = d.src.Timers(ctx, "")
	v.Jobs, v.JobsErr = d.src.JobsState(ctx, d.o.Limit)
	return v
}

func (d *Dashboard) render(w http.ResponseWriter, name string, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := d.tmpl.ExecuteTemplate(w, name, v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	v := d.snapshot(r.Context())
	v.Message = r.URL.Query().Get("msg")
	d.render(w, "page.html", v)
}

func (d *Dashboard) fragment(w http.ResponseWriter, r *http.Request) {
	d.render(w, "sections", d.snapshot(r.Context()))
}

// sameOrigin checks what browsers send about a request's origin.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

func (d *Dashboard) action(w http.ResponseWriter, r *http.Request) {
	if !d.o.AllowActions {
		http.Error(w, "actions are disabled: start the dashboard with --allow-actions", http.StatusForbidden)
		return
	}
	if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(d.csrf)) != 1 {
		http.Error(w, "cross-site request refused: reload the dashboard and try again", http.StatusForbidden)
		return
	}
	id := r.PostFormValue("id")
	if id == "" {
		http.Error(w, "no job id", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.o.Timeout)
	defer cancel()
	var err error
	var msg string
	if r.URL.Path == "/jobs/retry" {
		_, err = d.src.Retry(ctx, id)
		msg = "job " + id + " is back in flight: the application's recovery scan will requeue it"
	} else {
		err = d.src.Purge(ctx, id)
		msg = "job " + id + " purged"
	}
	switch {
	case errors.Is(err, ops.ErrNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, "/?msg="+url.QueryEscape(msg), http.StatusSeeOther)
}
