package redislock

// SetAnyEachChunk sets the most keys and requests of one TryAcquireAnyEach
// script for a test, and returns what puts them back: chunk boundaries
// within a few requests.
func SetAnyEachChunk(keys, requests int) (restore func()) {
	oldKeys, oldRequests := anyEachKeys, anyEachRequests
	anyEachKeys, anyEachRequests = keys, requests
	return func() { anyEachKeys, anyEachRequests = oldKeys, oldRequests }
}

// KeySlot is the Cluster hash slot of a key with the hash tag tag.
func KeySlot(tag string) uint16 { return keySlot("{" + tag + "}") }
