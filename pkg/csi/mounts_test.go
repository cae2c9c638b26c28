package csi_test

import (
	"testing"

	"github.com/epochfs/epochfs/internal/testenv"
)

// mountsUnder lists mount points at or below dir (testenv.MountsUnder).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	m, err := testenv.MountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
