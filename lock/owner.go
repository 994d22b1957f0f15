package lock

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
)

// NewOwner returns a fresh owner identity, "hostname/pid/random": readable
// in listings, and unique to one backend instance even when a host runs
// several processes or a process several instances.
func NewOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}
