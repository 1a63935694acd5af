package storage

// SetDeleteChunk makes DeleteRows delete n rows at a time, for tests of its
// loop; it returns a function restoring the default.
func SetDeleteChunk(n int) (restore func()) {
	old := deleteChunk
	deleteChunk = n
	return func() { deleteChunk = old }
}

// SetLeaseSharing turns the sharing of write leases by the calls of one
// account on or off, for tests that need one row per lease; it returns a
// function restoring sharing.
func SetLeaseSharing(on bool) (restore func()) {
	old := leaseSharing
	leaseSharing = on
	return func() { leaseSharing = old }
}
