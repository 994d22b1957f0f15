package bench

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/leasehold-go/leasehold/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	workerMain()
	probeMain()
	testenv.Main(m)
}

// ttl is the lease every library is given: long enough that no run of a
// benchmark waits for an expiry.
const ttl = 30 * time.Second

// uniqueKey names a key no other benchmark or run uses.
func uniqueKey(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "/" + hex.EncodeToString(b[:])
}

// workload returns full, or short under -short (the CI smoke run).
func workload[T any](full, short T) T {
	if testing.Short() {
		return short
	}
	return full
}
