package csi

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	Point  string
	FSType string
}

// mounts returns the mount table of this process's mount namespace.
func mounts() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// id parent maj:min root point options [optional...] - fstype source superopts
		if len(fields) < 10 {
			continue
		}
		sep := 6
		for sep < len(fields) && fields[sep] != "-" {
			sep++
		}
		if sep+1 >= len(fields) {
			continue
		}
		out = append(out, mountEntry{Point: unescapeMount(fields[4]), FSType: fields[sep+1]})
	}
	return out, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space…) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMounted reports whether path is a mount point, and its file system type.
func isMounted(path string) (bool, string, error) {
	ms, err := mounts()
	if err != nil {
		return false, "", err
	}
	found, fstype := false, ""
	for _, m := range ms {
		if m.Point == path {
			found, fstype = true, m.FSType // the last one is on top
		}
	}
	return found, fstype, nil
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
