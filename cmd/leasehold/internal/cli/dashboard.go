package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

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
		return usagef("--addr %s is not a loopback address: the dashboard has no authentication; pass --allow-remote to serve it there anyway (behind your own access control)", addr)
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
	srv := &http.Server{Handler: dashboard.New(src, dashboard.Options{AllowActions: allowActions, Timeout: e.c.timeout}), ReadHeaderTimeout: 10 * time.Second}
	mode := "read-only"
	if allowActions {
		mode = "actions enabled"
	}
	fmt.Fprintf(e.stderr, "leasehold dashboard on http://%s/ (%s; backend %s)\n", ln.Addr(), mode, redact(e.c.backend))
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
