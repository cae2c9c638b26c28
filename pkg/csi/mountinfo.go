package csi

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	mountutils "k8s.io/mount-utils"
)

// mountsAt returns the mount table's entries (of this process's mount
// namespace, read by github.com/moby/sys/mountinfo, which unescapes the
// kernel's \ooo octal escapes) whose mount point is path, bottom first.
func mountsAt(path string) ([]*mountinfo.Info, error) {
	return mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != path, false
	})
}

// isMounted reports whether path is a mount point, and its file system type
// (of the mount on top when several are stacked there).
func isMounted(path string) (bool, string, error) {
	infos, err := mountsAt(path)
	if err != nil {
		return false, "", fmt.Errorf("csi: mount table: %w", err)
	}
	if len(infos) == 0 {
		return false, "", nil
	}
	return true, infos[len(infos)-1].FSType, nil // the last one is on top
}

// fuseConn returns the id of the FUSE connection mounted at path (the minor
// number of its device, read from the mount table: never from the file
// system, whose server may hang), and whether a FUSE mount is there.
func fuseConn(path string) (uint32, bool) {
	infos, err := mountsAt(path)
	if err != nil {
		return 0, false
	}
	for i := len(infos) - 1; i >= 0; i-- {
		if m := infos[i]; strings.HasPrefix(m.FSType, "fuse") {
			return uint32(m.Minor), true
		}
	}
	return 0, false
}

// errDeadMount: a FUSE mount whose server is gone (ENOTCONN).
var errDeadMount = errors.New("mount is dead (transport endpoint is not connected)")

// checkMount reports nil when path is a mount point that answers statfs.
// statfs always reaches the FUSE server (stat may be answered from the
// kernel's attribute cache, which outlives a dead server).
func checkMount(path string) error {
	ok, _, err := isMounted(path)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not mounted", path)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
			return fmt.Errorf("%s: %w", path, errDeadMount)
		}
		return fmt.Errorf("statfs %s: %w", path, err)
	}
	return nil
}

// bindReadOnly bind-mounts src at dst read-only, nosuid and nodev, with
// k8s.io/mount-utils (mount(8): the bind, then the read-only remount that
// also keeps src's own noexec/noatime flags). When the remount fails, it
// detaches the writable bind that mount-utils leaves behind.
func bindReadOnly(src, dst string) error {
	before, err := mountsAt(dst)
	if err != nil {
		return fmt.Errorf("csi: mount table: %w", err)
	}
	if err := mountutils.NewWithoutSystemd("").Mount(src, dst, "", []string{"bind", "ro", "nosuid", "nodev"}); err != nil {
		if after, _ := mountsAt(dst); len(after) > len(before) {
			_ = syscall.Unmount(dst, syscall.MNT_DETACH)
		}
		return fmt.Errorf("bind %s read-only at %s: %w", src, dst, err)
	}
	return nil
}

// unmountAll unmounts every mount stacked at path (lazily when busy). A path
// that is not mounted is fine. Hand-written with umount2(2): mount-utils'
// Unmount and CleanupMountPoint exec umount(8), which stats the path (a hung
// FUSE server blocks it) and cannot detach lazily, and CleanupMountPoint
// also removes the directory and misses binds from the same file system.
func unmountAll(path string) error {
	for range 8 {
		ok, _, err := isMounted(path)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := syscall.Unmount(path, 0); err != nil {
			if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				return fmt.Errorf("unmount %s: %w", path, err)
			}
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 8 unmounts", path)
}
