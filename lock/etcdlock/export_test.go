package etcdlock

// SetReleasesPerTxn sets the most deletes of one ReleaseEach Txn, and
// returns a func that restores it.
func SetReleasesPerTxn(n int) (restore func()) {
	old := releasesPerTxn
	releasesPerTxn = n
	return func() { releasesPerTxn = old }
}
