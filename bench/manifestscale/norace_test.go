//go:build !race

package main

const testFiles = 100_000
