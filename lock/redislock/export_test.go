package redislock

// SetReleaseChunk sets the most grants one script of ReleaseEach
// releases, and returns a func that restores it.
func SetReleaseChunk(n int) (restore func()) {
	old := releaseChunk
	releaseChunk = n
	return func() { releaseChunk = old }
}

// ReleaseScripts are the hashes of the scripts that release grants
// (Release's and ReleaseEach's).
var ReleaseScripts = []string{releaseScript.Hash(), releaseEachScript.Hash()}

// Chunks are the most claims one script of ClaimEach makes and grants one
// of ReleaseEach releases.
func Chunks() (claims, releases int) { return claimChunk, releaseChunk }
