package csi

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	mountutils "k8s.io/mount-utils"
)

// mountTable is the mount table of this process's mount namespace.
const mountTable = "/proc/self/mountinfo"

// mountinfoEscaper escapes a path the way the kernel writes mount points in
// mountinfo (octal \ooo for space, tab, newline and backslash), so that a
// path can be compared with k8s.io/mount-utils' MountPoint field, which is
// left escaped.
var mountinfoEscaper = strings.NewReplacer(`\`, `\134`, " ", `\040`, "\t", `\011`, "\n", `\012`)

// isMounted reports whether path is a mount point, and its file system type
// (of the mount on top when several are stacked there).
func isMounted(path string) (bool, string, error) {
	infos, err := mountutils.ParseMountInfo(mountTable)
	if err != nil {
		return false, "", fmt.Errorf("csi: mount table: %w", err)
	}
	escaped := mountinfoEscaper.Replace(path)
	found, fstype := false, ""
	for _, m := range infos {
		if m.MountPoint == escaped {
			found, fstype = true, m.FsType // the last one is on top
		}
	}
	return found, fstype, nil
}

// fuseConn returns the id of the FUSE connection mounted at path (the minor
// number of its device, read from the mount table: never from the file
// system, whose server may hang), and whether a FUSE mount is there.
func fuseConn(path string) (uint32, bool) {
	infos, err := mountutils.ParseMountInfo(mountTable)
	if err != nil {
		return 0, false
	}
	escaped := mountinfoEscaper.Replace(path)
	for i := len(infos) - 1; i >= 0; i-- {
		if m := infos[i]; m.MountPoint == escaped && strings.HasPrefix(m.FsType, "fuse") {
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

// bindReadOnly bind-mounts src at dst read-only.
func bindReadOnly(src, dst string) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", src, dst, err)
	}
	if err := syscall.Mount("", dst, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
		_ = syscall.Unmount(dst, syscall.MNT_DETACH)
		return fmt.Errorf("remount %s read-only: %w", dst, err)
	}
	return nil
}

// unmountAll unmounts every mount stacked at path (lazily when busy). A path
// that is not mounted is fine.
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
