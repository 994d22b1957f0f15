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

// AnyEachWindow is the most scripts one pipeline of TryAcquireAnyEach
// carries.
func AnyEachWindow() int { return anyEachWindow }

// Chunks are the most claims one script of ClaimEach makes, requests and
// keys one of TryAcquireAnyEach takes, and grants one of ReleaseEach
// releases.
func Chunks() (claims, anyRequests, anyKeys, releases int) {
	return claimChunk, anyEachRequests, anyEachKeys, releaseChunk
}

// SetAnyEachWindow sets AnyEachWindow for a test, and returns what puts it
// back.
func SetAnyEachWindow(n int) (restore func()) {
	old := anyEachWindow
	anyEachWindow = n
	return func() { anyEachWindow = old }
}
