package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireFUSE skips (or, under CI=true, fails) a test that needs to mount a
// FUSE file system when this process cannot: no /dev/fuse, or neither root
// nor fuse3's fusermount3.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("FUSE mount test skipped in -short mode")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		RequireOrSkip(t, "FUSE", "/dev/fuse is not available")
		return
	}
	if os.Geteuid() == 0 {
		return
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		RequireOrSkip(t, "FUSE", "mounting needs root or fuse3's fusermount3 on the PATH")
	}
}
