//go:build race

package manifest

// raceEnabled: the race detector makes the 1M-entry tests take minutes.
const raceEnabled = true
