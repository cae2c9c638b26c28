package mirror

import (
	"time"
)

// SetRemeasure changes how long a replica's latency measure lasts, for one
// test; the returned func restores it.
func SetRemeasure(d time.Duration) (restore func()) {
	old := mirrorRemeasure
	mirrorRemeasure = d
	return func() { mirrorRemeasure = old }
}
