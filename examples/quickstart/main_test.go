package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestQuickstart(t *testing.T) {
	check(t, "mem://quickstart-test")
}

// The same story on every real backend, through -backend.
func TestQuickstartOnEveryBackend(t *testing.T) {
	urls := map[string]func() string{
		"redis":    func() string { return "redis://" + testenv.Redis(t).Addr() },
		"postgres": func() string { return testenv.Postgres(t).DSN() },
		"etcd":     func() string { return "etcd://" + strings.Join(testenv.Etcd(t).Endpoints(), ",") },
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			check(t, url())
		})
	}
}

func check(t *testing.T, url string) {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), &out, url); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"REJECTED by the ledger", "stale writes rejected:           1", "max simultaneous valid holders:  1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
