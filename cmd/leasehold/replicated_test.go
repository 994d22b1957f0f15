package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/cmd/leasehold/internal/ops"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

// The CLI takes the URLs of replicated servers as backend.Open does: a
// redis+sentinel:// URL and a multi-host PostgreSQL DSN, for the locks and
// for the jobs registry on the same server.
func TestReplicatedURLs(t *testing.T) {
	sentinel := func() string {
		return testenv.NewRedis(t, testenv.Replicas(1), testenv.Sentinels(3)).SentinelURL()
	}
	standby := func() string { return testenv.NewPostgres(t, testenv.Replicas(1)).DSN() }
	for name, url := range map[string]func() string{"sentinel": sentinel, "standby": standby} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := url()
			l, closeFn, err := backend.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer closeFn()
			key := fmt.Sprintf("cli-replicated-%d", time.Now().UnixNano())
			h, err := l.TryAcquire(t.Context(), key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(t.Context())
			var locks []ops.Grant
			decodeJSON(t, &locks, "locks", key, "--backend", url)
			if len(locks) != 1 || locks[0].Key != key || locks[0].Token != h.Token() {
				t.Fatalf("locks %+v, want %s with token %d", locks, key, h.Token())
			}
			var st ops.Jobs
			decodeJSON(t, &st, "jobs", "--backend", url, "--namespace", key, "--table", "cli_replicated")
			if st.Counts.Tracked != 0 || st.Counts.Dead != 0 {
				t.Fatalf("jobs %+v, want an empty registry", st.Counts)
			}
		})
	}
}
