package etcdlock_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/etcdlock"
)

// HealthCheck leaves no key under the Lock's prefix.
func TestHealthCheckLeavesNoKeys(t *testing.T) {
	srv := testenv.Etcd(t)
	prefix := fmt.Sprintf("health-%d/", time.Now().UnixNano())
	l := newLock(t, srv.Endpoints(), etcdlock.WithPrefix(prefix))
	client := newClient(t, srv.Endpoints())
	ctx := t.Context()
	count := func() int64 {
		t.Helper()
		r, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	before := count()
	const probes = 20
	for range probes {
		if _, err := lock.HealthCheck(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if after := count(); after != before {
		t.Fatalf("%d keys under %q before %d probes, %d after; a probe must leave nothing behind", before, prefix, probes, after)
	}
}
