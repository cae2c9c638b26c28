package s3

// SetMaxListPageBytes changes the cap on a listing page's body, for one
// test; the returned func restores it.
func SetMaxListPageBytes(n int64) (restore func()) {
	old := maxListPageBytes
	maxListPageBytes = n
	return func() { maxListPageBytes = old }
}
