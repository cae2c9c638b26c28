package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epochfs/epochfs/pkg/mount/fusectl"
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

// FUSEConn returns the kernel's id of the FUSE connection mounted at mnt
// (its directory name under /sys/fs/fuse/connections): the minor number of
// the mount's device.
func FUSEConn(mnt string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		return 0, err
	}
	return unix.Minor(st.Dev), nil
}

// KillFUSEServer sends SIGKILL to a FUSE server process serving mnt (conn
// from FUSEConn, taken while it was mounted) and waits for it to exit; if it
// has not within 5 s, it aborts the connection so that it can. wait is the
// process's Wait (exec.Cmd.Wait).
func KillFUSEServer(p *os.Process, conn uint32, wait func() error) error {
	if err := p.Signal(unix.SIGKILL); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
	}
	if err := fusectl.Abort(conn); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testenv: FUSE server %d did not exit after SIGKILL and aborting its connection", p.Pid)
	}
}
