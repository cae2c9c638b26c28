// Package fusectl aborts FUSE connections through the kernel's fusectl file
// system (/sys/fs/fuse/connections). It is the way out of a FUSE server that
// cannot exit: a server killed with SIGKILL while one of its own threads
// closes a file on its own mount (go-fuse's poll hack does, right after the
// mount) waits in that FLUSH, uninterruptibly, for itself to answer; only
// aborting the connection frees it. A leaf package: the standard library
// and x/sys only.
package fusectl

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Dir is where the fusectl file system is mounted.
const Dir = "/sys/fs/fuse/connections"

// Abort aborts FUSE connection id (the minor device number of the mount,
// as /proc/self/mountinfo shows it, or unix.Minor of its st_dev), mounting
// fusectl at Dir first when it is not mounted. Needs root.
func Abort(id uint32) error {
	abort := fmt.Sprintf("%s/%d/abort", Dir, id)
	if _, err := os.Stat(abort); err != nil {
		if err := Ensure(); err != nil {
			return err
		}
	}
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		return fmt.Errorf("fusectl: abort connection %d: %w", id, err)
	}
	return nil
}

// Ensure mounts the fusectl file system at Dir unless it is mounted (a
// machine just booted may not have it: systemd mounts it only on demand).
// Needs root.
func Ensure() error {
	var st unix.Statfs_t
	if err := unix.Statfs(Dir, &st); err == nil && st.Type == fusectlMagic {
		return nil
	}
	if err := unix.Mount("fusectl", Dir, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("fusectl: mount %s: %w", Dir, err)
	}
	return nil
}

// fusectlMagic is the fusectl file system's statfs type (FUSE_CTL_SUPER_MAGIC).
const fusectlMagic = 0x65735543
