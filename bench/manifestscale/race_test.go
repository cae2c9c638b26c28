//go:build race

package main

// testFiles: the race detector slows the listing and the lookups ~10×.
const testFiles = 20_000
