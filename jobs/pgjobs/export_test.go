package pgjobs

import "testing"

// HeartbeatChunk and ListChunk are the chunk sizes, for the tests.
func HeartbeatChunk() int { return heartbeatChunk }
func ListChunk() int      { return listChunk }

// SetListChunk makes pages of n for the rest of t (t must not be parallel).
func SetListChunk(t testing.TB, n int) {
	old := listChunk
	listChunk = n
	t.Cleanup(func() { listChunk = old })
}

// SetCountChunk makes counting pages of n for the rest of t (t must not be
// parallel).
func SetCountChunk(t testing.TB, n int) {
	old := countChunk
	countChunk = n
	t.Cleanup(func() { countChunk = old })
}
