package cli

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"
)

// TestServerTimeouts: the dashboard's server bounds every phase of a
// request (it had ReadHeaderTimeout only: a client could trickle a body
// or hold idle connections for ever).
func TestServerTimeouts(t *testing.T) {
	srv := newServer(http.NotFoundHandler(), 10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 10*time.Second || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("server %+v", srv)
	}
}
