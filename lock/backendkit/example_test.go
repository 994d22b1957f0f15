package backendkit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/backendkit"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

// tenantLock is a tiny wrapper backend: it keeps tenants apart on one
// shared backend by prefixing their keys. It checks its input against the
// limits it states before anything reaches the backend, hands back the
// caller's key, and passes the owner identity on (lock.Owned), so that the
// tools name the process as the backend does.
type tenantLock struct {
	inner  lock.Lock
	prefix string
}

func (t tenantLock) TryAcquire(ctx context.Context, key string, ttl time.Duration) (lock.Handle, error) {
	if err := backendkit.Validate(ctx, key, ttl, t.Limits()); err != nil {
		return nil, err
	}
	h, err := t.inner.TryAcquire(ctx, t.prefix+key, ttl)
	if err != nil {
		var held *lock.NotAcquiredError
		if errors.As(err, &held) { // report the caller's key, not ours
			return nil, backendkit.NotAcquired(key, held.Remaining)
		}
		return nil, err
	}
	return tenantHandle{Handle: h, key: key}, nil
}

// Limits are the backend's: the ttl bounds and the size of a key set.
func (t tenantLock) Limits() lock.Limits { return lock.LimitsOf(t.inner) }

func (t tenantLock) Owner() string { return backendkit.OwnerOf(t.inner, "") }

type tenantHandle struct {
	lock.Handle
	key string
}

func (h tenantHandle) Key() string { return h.key }

// A wrapper backend. Before it ships, it runs lock/locktest.Run.
func Example_wrapper() {
	shared, err := memlock.New(memlock.WithCommon(lock.Common{Owner: "host-a"}))
	if err != nil {
		log.Fatal(err)
	}
	var acme lock.Lock = tenantLock{inner: shared, prefix: "tenant/acme/"}
	ctx := context.Background()

	h, err := acme.TryAcquire(ctx, "reports/daily", time.Minute)
	fmt.Println(h.Key(), h.Token(), err)
	_, err = acme.TryAcquire(ctx, "reports/daily", time.Minute)
	var held *lock.NotAcquiredError
	fmt.Println(errors.As(err, &held), held.Key)
	_, err = acme.TryAcquire(ctx, "reports/daily", -time.Second)
	fmt.Println(errors.Is(err, lock.ErrInvalidTTL))
	fmt.Println(backendkit.OwnerOf(acme, "unknown"))

	g, _, _ := shared.Inspect(ctx, "tenant/acme/reports/daily")
	fmt.Println(g.Key, g.Owner)
	// Output:
	// reports/daily 1 <nil>
	// true reports/daily
	// true
	// host-a
	// tenant/acme/reports/daily host-a
}

// A network backend reads the clock before it sends a request and sets the
// handle's deadline from that reading: the ttl less the drift allowance for
// the difference between its clock's rate and the server's.
func ExampleValidUntil() {
	sent := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC) // time.Now() before the request
	ttl := 30 * time.Second
	fmt.Println(backendkit.DriftAllowance(ttl))
	fmt.Println(backendkit.ValidUntil(sent, ttl).Format(time.TimeOnly + ".000"))
	// Output:
	// 302ms
	// 12:00:29.698
}

// A backend's own options: a type of its own, so that another package's
// option does not compile here, and input errors that name the package.
type tenantOption func(*tenantConfig) error

type tenantConfig struct {
	prefix string
	common lock.Common
}

func withTenant(name string) tenantOption {
	return func(c *tenantConfig) error {
		if err := backendkit.CheckName("tenant", name); err != nil {
			return err
		}
		c.prefix = "tenant/" + name + "/"
		return nil
	}
}

func withCommon(c lock.Common) tenantOption {
	return func(cfg *tenantConfig) error { cfg.common = cfg.common.Merge(c); return nil }
}

func newTenantLock(inner lock.Lock, opts ...tenantOption) (lock.Lock, error) {
	var cfg tenantConfig
	if err := backendkit.Apply("tenantlock", &cfg, opts); err != nil {
		return nil, err
	}
	common, err := backendkit.Resolve("tenantlock", cfg.common, backendkit.OwnerOf(inner, ""))
	if err != nil {
		return nil, err
	}
	common.Logger.Debug("tenant lock ready", "prefix", cfg.prefix, "owner", common.Owner)
	return tenantLock{inner: inner, prefix: cfg.prefix}, nil
}

func ExampleApply() {
	shared, err := memlock.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = newTenantLock(shared, withTenant("acme"), withCommon(lock.Common{Owner: "host-a"}))
	fmt.Println(err)
	_, err = newTenantLock(shared, withTenant(""))
	fmt.Println(errors.Is(err, lock.ErrInvalidArgument))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// tenantlock: invalid argument: tenant "" is empty
}
