package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/dashboard"
)

// loopback reports whether addr's host is a loopback address or localhost.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// dashboard serves the dashboard on addr until ctx ends.
func (e *env) dashboard(ctx context.Context, addr string, allowActions, allowRemote bool) error {
	if !loopback(addr) && !allowRemote {
		return usagef("--addr %s is not a loopback address: pass --allow-remote to serve the dashboard there (every request then needs the access token printed at start; put it behind TLS and your own access control)", addr)
	}
	openCtx, cancel := context.WithTimeout(ctx, e.c.timeout)
	src, err := e.open(openCtx)
	cancel()
	if err != nil {
		return err
	}
	defer src.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w (is another process using the port? pick another with --addr)", addr, err)
	}
	o := dashboard.Options{AllowActions: allowActions, Timeout: e.c.timeout, Limit: e.c.limit,
		Logger: slog.New(slog.NewTextHandler(e.stderr, nil))}
	if allowRemote {
		o.Token = rand.Text() // per start, as Jupyter's
	}
	srv := newServer(dashboard.New(src, o), e.c.timeout, o.Logger)
	mode := "read-only"
	if allowActions {
		mode = "actions enabled"
	}
	url := fmt.Sprintf("http://%s/", ln.Addr())
	if o.Token != "" {
		url += "?token=" + o.Token
	}
	fmt.Fprintf(e.stderr, "leasehold dashboard on %s (%s; backend %s)\n", url, mode, backend.Redact(e.c.backend))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newServer is the dashboard's HTTP server: every phase of a request has a
// time limit (a page waits up to timeout for the backend), so that slow or
// idle clients cannot hold connections.
func newServer(h http.Handler, timeout time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      timeout + 10*time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
