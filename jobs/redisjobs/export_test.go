package redisjobs

import "testing"

// HeartbeatChunk, HeartbeatWindow and ListChunk are the chunk sizes and
// the heartbeat scripts in flight at once, for the tests.
func HeartbeatChunk() int  { return heartbeatChunk }
func HeartbeatWindow() int { return heartbeatWindow }
func ListChunk() int       { return listChunk }

// SetListChunk makes pages of n for the rest of t (t must not be parallel).
func SetListChunk(t testing.TB, n int) {
	old := listChunk
	listChunk = n
	t.Cleanup(func() { listChunk = old })
}

// HeartbeatScript and ListScript are the hashes of the heartbeat and
// listing scripts, as EVALSHA names them.
func HeartbeatScript() string { return heartbeatScript.Hash() }
func ListScript() string      { return expiredScript.Hash() }

// DeadScript is the hash of the dead set's listing script.
func DeadScript() string { return deadScript.Hash() }
