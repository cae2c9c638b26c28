package backend

import "time"

// SetMirrorRemeasure changes how long a mirror replica's latency measure
// lasts, for one test; the returned func restores it.
func SetMirrorRemeasure(d time.Duration) (restore func()) {
	old := mirrorRemeasure
	mirrorRemeasure = d
	return func() { mirrorRemeasure = old }
}

// SetMaxListPageBytes changes the cap on an S3 listing page's body, for one
// test; the returned func restores it.
func SetMaxListPageBytes(n int64) (restore func()) {
	old := maxListPageBytes
	maxListPageBytes = n
	return func() { maxListPageBytes = old }
}
