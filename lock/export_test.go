package lock

// SetKeeperReleaseChunk sets the most handles a Keeper gives one
// ReleaseEach, and returns a func that restores it.
func SetKeeperReleaseChunk(n int) (restore func()) {
	old := keeperReleaseChunk
	keeperReleaseChunk = n
	return func() { keeperReleaseChunk = old }
}
