package backend_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold-go/leasehold/backend"
	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/lock"
)

// prober takes a fresh key every 10 ms and remembers when each attempt
// that succeeded had started. The keys share the hash tag {probe}: on a
// Redis Cluster, one master serves them all.
type prober struct {
	mu   sync.Mutex
	oks  []time.Time
	stop context.CancelFunc
	done chan struct{}
}

func probe(l lock.Lock) *prober {
	ctx, stop := context.WithCancel(context.Background())
	p := &prober{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ctx.Err() == nil; i++ {
			start := time.Now()
			actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			// The probes' ttl is the PostgreSQL standby's quarantine after
			// the promotion: the longest ttl granted before it.
			h, err := l.TryAcquire(actx, fmt.Sprintf("{probe}-%d-%d", start.UnixNano(), i), time.Second)
			cancel()
			if err == nil {
				p.mu.Lock()
				p.oks = append(p.oks, start)
				p.mu.Unlock()
				_ = h.Release(context.Background())
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return p
}

// recovery returns the time from fault to the end of the first successful
// attempt that started after it, waiting for one up to a minute.
func (p *prober) recovery(b *testing.B, fault time.Time) time.Duration {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		for _, start := range p.oks {
			if start.After(fault) {
				p.mu.Unlock()
				return start.Sub(fault)
			}
		}
		p.mu.Unlock()
	}
	b.Fatalf("no grant within a minute of the fault")
	return 0
}

func (p *prober) close() { p.stop(); <-p.done }

// BenchmarkFailoverRecovery is the time from the death of the primary
// (SIGKILL of the Redis primary or master, immediate shutdown of the
// PostgreSQL primary, SIGKILL of the etcd leader) to the next successful
// grant, through the URL an application would use, per topology. Each
// iteration is one failover: run it with -benchtime 5x (or more). It
// reports p50-ms and max-ms over the iterations; ns/op includes the time
// to bring the old primary back as a replica.
func BenchmarkFailoverRecovery(b *testing.B) {
	type topo struct {
		url  string
		kill func(b *testing.B) time.Time // the fault; when it was injected
	}
	topologies := map[string]func(b *testing.B) topo{
		"sentinel": func(b *testing.B) topo {
			srv := testenv.NewRedis(b, testenv.Replicas(1), testenv.Sentinels(3))
			return topo{srv.SentinelURL(), func(b *testing.B) time.Time { srv.Failover(b, testenv.Crash); return srv.FaultAt() }}
		},
		"cluster": func(b *testing.B) topo {
			srv := testenv.NewRedis(b, testenv.Members(3), testenv.Replicas(1))
			return topo{"redis+cluster://" + strings.Join(srv.Endpoints(), ","), func(b *testing.B) time.Time {
				srv.FailoverKey(b, testenv.Crash, "{probe}") // the master of every probe key (their hash tag)
				return srv.FaultAt()
			}}
		},
		"postgres-standby": func(b *testing.B) topo {
			srv := testenv.NewPostgres(b, testenv.Replicas(1))
			return topo{srv.DSN(), func(b *testing.B) time.Time { srv.Failover(b, testenv.Crash); return srv.FaultAt() }}
		},
		"etcd-leader": func(b *testing.B) topo {
			srv := testenv.NewEtcd(b, testenv.Members(3))
			return topo{"etcd://" + strings.Join(srv.Endpoints(), ","), func(b *testing.B) time.Time {
				i := etcdLeader(b, srv.Endpoints())
				at := time.Now()
				srv.StopMember(b, i)
				srv.StartMember(b, i)
				return at
			}}
		},
	}
	for _, name := range []string{"sentinel", "cluster", "postgres-standby", "etcd-leader"} {
		b.Run(name, func(b *testing.B) {
			tp := topologies[name](b)
			l, closeFn, err := backend.Open(b.Context(), tp.url)
			if err != nil {
				b.Fatal(err)
			}
			defer closeFn()
			var took []time.Duration
			for b.Loop() {
				p := probe(l)
				fault := tp.kill(b)
				took = append(took, p.recovery(b, fault))
				p.close()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
			b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms")
		})
	}
}

// etcdLeader returns the index of the member that leads.
func etcdLeader(b *testing.B, endpoints []string) int {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for i, ep := range endpoints {
		st, err := c.Status(b.Context(), ep)
		if err == nil && st.Header.MemberId == st.Leader {
			return i
		}
	}
	b.Fatal("no leader")
	return 0
}
