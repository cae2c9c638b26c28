package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// AbortFUSE aborts FUSE connection id, mounting the fusectl file system at
// /sys/fs/fuse/connections first if needed. It is the way out of a FUSE
// server that cannot exit: a process killed with SIGKILL while one of its
// own threads closes a file on its own mount (go-fuse's poll hack at mount
// time does) waits in that FLUSH, uninterruptibly, for itself to answer.
func AbortFUSE(id uint32) error {
	const dir = "/sys/fs/fuse/connections"
	abort := fmt.Sprintf("%s/%d/abort", dir, id)
	if _, err := os.Stat(abort); err != nil {
		if err := unix.Mount("fusectl", dir, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("testenv: mount fusectl: %w", err)
		}
	}
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		return fmt.Errorf("testenv: abort FUSE connection %d: %w", id, err)
	}
	return nil
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
	if err := AbortFUSE(conn); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testenv: FUSE server %d did not exit after SIGKILL and aborting its connection", p.Pid)
	}
}
