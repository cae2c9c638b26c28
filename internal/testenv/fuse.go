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
		fuseMissing(t, "FUSE: /dev/fuse is not available")
		return
	}
	if os.Geteuid() == 0 {
		return
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		fuseMissing(t, "FUSE: mounting needs root or fuse3's fusermount3 on the PATH")
	}
}

// fuseMissing applies the project's rule for a missing test prerequisite: skip
// with a clear message on a developer's machine, fail under CI=true.
func fuseMissing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a missing prerequisite is a failure)", msg)
	}
	t.Skip(msg)
}
