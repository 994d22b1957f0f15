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

// OwnerOf is the one rule by which the tools (leader, timers, jobs) name
// the process they run in: l's owner identity when l is Owned and reports
// one, and fallback otherwise (the tool's configured owner, WithOwner or
// NewOwner).
func OwnerOf(l Lock, fallback string) string {
	if o, ok := l.(Owned); ok {
		if owner := o.Owner(); owner != "" {
			return owner
		}
	}
	return fallback
}
