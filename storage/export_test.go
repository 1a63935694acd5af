package storage

// SetDeleteChunk makes DeleteRows delete n rows at a time, for tests of its
// loop; it returns a function restoring the default.
func SetDeleteChunk(n int) (restore func()) {
	old := deleteChunk
	deleteChunk = n
	return func() { deleteChunk = old }
}
