package redisjobs_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
	"github.com/leasehold-go/leasehold/jobs"
	"github.com/leasehold-go/leasehold/jobs/redisjobs"
	"github.com/leasehold-go/leasehold/jobs/registrytest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestConformance(t *testing.T) {
	srv := testenv.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	registrytest.Run(t, func(t testing.TB) jobs.Registry {
		r, err := redisjobs.New(c, "test:"+t.Name()+":"+time.Now().Format("150405.000000000"))
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}
