package memlock_test

import (
	"testing"

	"github.com/leasehold-go/leasehold/lock"
	"github.com/leasehold-go/leasehold/lock/locktest"
	"github.com/leasehold-go/leasehold/lock/memlock"
)

func TestMemlockConformance(t *testing.T) {
	shared := memlock.New()
	// Every instance shares one in-process table, as processes share a server.
	locktest.Run(t, func(testing.TB) lock.Lock { return shared.Share() })
}
