//go:build !race

package manifest

const raceEnabled = false
